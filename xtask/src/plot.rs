//! The one line-plot helper of xtask's reports (`report multicast`,
//! `bench`): labelled curves, solid or dashed, with points, into an SVG
//! (plotters, SVG back end). An axis is linear from 0, or logarithmic
//! (message sizes, latencies spanning decades): values are then plotted
//! as their log2 and the ticks labelled with the values themselves (so
//! ticks fall on powers of 2 where the range allows).

use std::path::Path;

use plotters::prelude::*;

/// One curve: its label and its (x, y) points.
pub type Curve = (String, Vec<(f64, f64)>);

/// How an axis is drawn.
#[derive(Clone, Copy)]
pub struct Axis<'a> {
    pub desc: &'a str,
    /// Logarithmic, ticks labelled by `fmt` (values must be above 0).
    pub log: Option<fn(f64) -> String>,
}

impl<'a> Axis<'a> {
    pub fn linear(desc: &'a str) -> Axis<'a> {
        Axis { desc, log: None }
    }

    pub fn log(desc: &'a str, fmt: fn(f64) -> String) -> Axis<'a> {
        Axis { desc, log: Some(fmt) }
    }

    fn map(&self, v: f64) -> f64 {
        if self.log.is_some() {
            v.max(f64::MIN_POSITIVE).log2()
        } else {
            v
        }
    }

    /// The drawn range for values up to `lo..=hi` (mapped).
    fn range(&self, lo: f64, hi: f64, pad: f64) -> std::ops::Range<f64> {
        if self.log.is_some() {
            let (lo, hi) = if lo <= hi { (lo, hi) } else { (0.0, 1.0) };
            (lo - 0.3)..(hi + 0.3).max(lo + 0.6)
        } else {
            0.0..hi.max(1.0) * pad
        }
    }
}

/// Draw `curves` (solid, with a dot per point) and `dashed` curves into
/// the SVG at `path`, the legend at `legend`.
pub fn curves(
    path: &Path,
    title: &str,
    x: Axis,
    y: Axis,
    solid: &[Curve],
    dashed: &[Curve],
    legend: SeriesLabelPosition,
) -> crate::Result<()> {
    let e = |err: &dyn std::fmt::Display| format!("plot {}: {err}", path.display());
    let map = |c: &[Curve]| -> Vec<Curve> {
        c.iter()
            .map(|(l, pts)| {
                let pts = pts
                    .iter()
                    .filter(|p| p.0.is_finite() && p.1.is_finite())
                    .filter(|p| (x.log.is_none() || p.0 > 0.0) && (y.log.is_none() || p.1 > 0.0))
                    .map(|&(a, b)| (x.map(a), y.map(b)))
                    .collect();
                (l.clone(), pts)
            })
            .collect()
    };
    let (solid, dashed) = (map(solid), map(dashed));
    let (mut xlo, mut xhi, mut ylo, mut yhi) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(a, b) in solid.iter().chain(&dashed).flat_map(|c| c.1.iter()) {
        (xlo, xhi, ylo, yhi) = (xlo.min(a), xhi.max(a), ylo.min(b), yhi.max(b));
    }
    let root = SVGBackend::new(path, (820, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|v| e(&v))?;
    let mut ch = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x.range(xlo, xhi, 1.05), y.range(ylo, yhi, 1.1))
        .map_err(|v| e(&v))?;
    let xf = |v: &f64| x.log.map_or(String::new(), |f| f(v.exp2()));
    let yf = |v: &f64| y.log.map_or(String::new(), |f| f(v.exp2()));
    let mut mesh = ch.configure_mesh();
    mesh.x_desc(x.desc).y_desc(y.desc);
    if x.log.is_some() {
        mesh.x_label_formatter(&xf);
    }
    if y.log.is_some() {
        mesh.y_label_formatter(&yf);
    }
    mesh.draw().map_err(|v| e(&v))?;
    for (i, (label, pts)) in solid.iter().enumerate() {
        let c = Palette99::pick(i).to_rgba();
        ch.draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(|v| e(&v))?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c));
        ch.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled()))).map_err(|v| e(&v))?;
    }
    for (i, (label, pts)) in dashed.iter().enumerate() {
        let c = Palette99::pick(i).to_rgba().mix(0.5);
        ch.draw_series(DashedLineSeries::new(pts.clone(), 6, 4, c.stroke_width(1)))
            .map_err(|v| e(&v))?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c));
    }
    ch.configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(|v| e(&v))?;
    root.present().map_err(|v| e(&v))
}
