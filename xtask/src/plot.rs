//! The one line-plot helper of xtask's reports (`report multicast`,
//! `report reliability`, `report scale`, `bench`): labelled curves into an
//! SVG (plotters, SVG back end), drawn to be read in a paper:
//!
//! - measured curves are solid lines with a marker of their own at each
//!   point (circle, triangle, square, diamond, cross, ...), in the
//!   Okabe-Ito colours, which stay apart for readers with any common
//!   colour-vision deficiency (its yellow, too faint on white, left out);
//! - model (reference) curves are dashed, in the colour of the measured
//!   curve they go with, and carry their own label ("binomial (model)");
//! - every curve has exactly one legend entry, drawn in a panel right of
//!   the plot, where it covers no point;
//! - a curve may carry error bars (least and most of several runs);
//! - axes span the data (error bars included) with a small margin, not
//!   from 0; a logarithmic axis plots values as their log2 and labels the
//!   ticks with the values themselves.

use std::path::Path;

use plotters::prelude::*;

/// One curve: its label and its (x, y) points.
pub type Curve = (String, Vec<(f64, f64)>);

/// Error bars of a curve: per point (in its order), the least and most y.
pub type Bars = Vec<(f64, f64)>;

/// How an axis is drawn.
#[derive(Clone, Copy)]
pub struct Axis<'a> {
    /// The axis label, with its unit ("latency (µs)").
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

    /// The drawn range for (mapped) values `lo..=hi`: the data and a
    /// margin of 5% of its span each side (a single value: 10% of it,
    /// or 1); a linear axis of values all at or above 0 stops at 0.
    fn range(&self, lo: f64, hi: f64) -> std::ops::Range<f64> {
        let (lo, hi) = if lo <= hi { (lo, hi) } else { (0.0, 1.0) };
        if self.log.is_some() {
            return (lo - 0.3)..(hi + 0.3).max(lo + 0.6);
        }
        let span = hi - lo;
        let pad = if span > 0.0 { span * 0.05 } else { (hi.abs() * 0.1).max(1.0) };
        let from = if lo >= 0.0 { (lo - pad).max(0.0) } else { lo - pad };
        from..hi + pad
    }
}

/// The Okabe-Ito colours but yellow: black, orange, sky blue, bluish
/// green, blue, vermillion, reddish purple.
pub const COLOURS: [RGBColor; 7] = [
    RGBColor(0x00, 0x00, 0x00),
    RGBColor(0xE6, 0x9F, 0x00),
    RGBColor(0x56, 0xB4, 0xE9),
    RGBColor(0x00, 0x9E, 0x73),
    RGBColor(0x00, 0x72, 0xB2),
    RGBColor(0xD5, 0x5E, 0x00),
    RGBColor(0xCC, 0x79, 0xA7),
];

/// Markers, one per measured curve in turn.
const MARKERS: usize = 6;

/// A linear axis's tick: whole numbers without a fraction ("4", not
/// "4.0"), others to 6 significant places.
pub fn tick(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{:.0}", v)
    } else {
        format!("{}", (v * 1e6).round() / 1e6)
    }
}

/// The label a model curve of `label` gets in the legend.
pub fn model_label(label: &str) -> String {
    format!("{label} (model)")
}

/// The plot's width in pixels, left of the legend.
const PLOT_WIDTH: u32 = 750;

/// The legend panel's width: room for its longest label (14 px sans
/// serif, about 7 px a character, after 46 px of line and marker), and
/// at least 210 px.
fn legend_width<'a>(labels: impl Iterator<Item = &'a str>) -> u32 {
    let chars = labels.map(|l| l.chars().count()).max().unwrap_or(0) as u32;
    (46 + 7 * chars + 12).max(210)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// A white SVG canvas at `path`: the whole, the plot's part and the
/// legend's part right of it, as wide as the longest of `labels` needs.
fn canvas<'a, 'l>(
    path: &'a Path,
    labels: impl Iterator<Item = &'l str>,
) -> crate::Result<(Area<'a>, Area<'a>, Area<'a>)> {
    let root = SVGBackend::new(path, (PLOT_WIDTH + legend_width(labels), 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|err| format!("plot {}: {err}", path.display()))?;
    let (plot_area, legend_area) = root.split_horizontally(PLOT_WIDTH);
    Ok((root, plot_area, legend_area))
}

type Chart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// Draw marker `kind` at each of `pts` in colour `c`.
fn markers(ch: &mut Chart, kind: usize, pts: &[(f64, f64)], c: RGBColor) -> Result<(), String> {
    let e = |v: &dyn std::fmt::Display| v.to_string();
    let s = c.filled();
    match kind % MARKERS {
        0 => ch.draw_series(pts.iter().map(|&p| Circle::new(p, 4, s))).map(|_| ()),
        1 => ch.draw_series(pts.iter().map(|&p| TriangleMarker::new(p, 5, s))).map(|_| ()),
        2 => ch
            .draw_series(
                pts.iter().map(|&p| EmptyElement::at(p) + Rectangle::new([(-4, -4), (4, 4)], s)),
            )
            .map(|_| ()),
        3 => ch
            .draw_series(pts.iter().map(|&p| {
                EmptyElement::at(p) + Polygon::new(vec![(0, -5), (5, 0), (0, 5), (-5, 0)], s)
            }))
            .map(|_| ()),
        4 => ch.draw_series(pts.iter().map(|&p| Cross::new(p, 4, c.stroke_width(2)))).map(|_| ()),
        _ => ch.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.stroke_width(2)))).map(|_| ()),
    }
    .map_err(|v| e(&v))
}

/// The same marker, drawn in the legend panel at pixel `at`.
fn legend_marker(
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    kind: usize,
    at: (i32, i32),
    c: RGBColor,
) -> Result<(), String> {
    let e = |v: &dyn std::fmt::Display| v.to_string();
    let s = c.filled();
    match kind % MARKERS {
        0 => area.draw(&Circle::new(at, 4, s)),
        1 => area.draw(&TriangleMarker::new(at, 5, s)),
        2 => area.draw(&Rectangle::new([(at.0 - 4, at.1 - 4), (at.0 + 4, at.1 + 4)], s)),
        3 => area.draw(&Polygon::new(
            vec![(at.0, at.1 - 5), (at.0 + 5, at.1), (at.0, at.1 + 5), (at.0 - 5, at.1)],
            s,
        )),
        4 => area.draw(&Cross::new(at, 4, c.stroke_width(2))),
        _ => area.draw(&Circle::new(at, 4, c.stroke_width(2))),
    }
    .map_err(|v| e(&v))
}

/// Draw `solid` curves (measured: a line and a marker per point) and
/// `dashed` ones (models: `dashed[i]` in `solid[i]`'s colour, labelled as
/// given; name them with [`model_label`]) into the SVG at `path`.
pub fn curves(
    path: &Path,
    title: &str,
    x: Axis,
    y: Axis,
    solid: &[Curve],
    dashed: &[Curve],
) -> crate::Result<()> {
    curves_with_bars(path, title, x, y, solid, &[], dashed)
}

/// [`curves`], `bars[i]` (when given) the error bars of `solid[i]`.
pub fn curves_with_bars(
    path: &Path,
    title: &str,
    x: Axis,
    y: Axis,
    solid: &[Curve],
    bars: &[Bars],
    dashed: &[Curve],
) -> crate::Result<()> {
    figure(path, title, x, y, solid, dashed, &Extras { bars, ..Extras::default() })
}

/// What a figure may carry beside its curves.
#[derive(Default)]
pub struct Extras<'a> {
    /// `bars[i]`: the error bars of `solid[i]`.
    pub bars: &'a [Bars],
    /// Draw a measured curve's marker at every n-th of its points only
    /// (dense series: a time line); 0 and 1 mean every point. Curves
    /// start at different points so their markers do not stack.
    pub marker_every: usize,
    /// Labelled vertical reference lines (x, label), drawn dotted in
    /// grey, the label at the top.
    pub vlines: &'a [(f64, String)],
}

/// [`curves`] with [`Extras`].
pub fn figure(
    path: &Path,
    title: &str,
    x: Axis,
    y: Axis,
    solid: &[Curve],
    dashed: &[Curve],
    extras: &Extras,
) -> crate::Result<()> {
    let bars = extras.bars;
    let e = |err: &dyn std::fmt::Display| format!("plot {}: {err}", path.display());
    let keep = |p: &(f64, f64)| {
        p.0.is_finite()
            && p.1.is_finite()
            && (x.log.is_none() || p.0 > 0.0)
            && (y.log.is_none() || p.1 > 0.0)
    };
    let map = |c: &[Curve]| -> Vec<Curve> {
        c.iter()
            .map(|(l, pts)| {
                (
                    l.clone(),
                    pts.iter().filter(|p| keep(p)).map(|&(a, b)| (x.map(a), y.map(b))).collect(),
                )
            })
            .collect()
    };
    // Error bars as (x, lo, hi), mapped, for the points kept.
    let mapped_bars: Vec<Vec<(f64, f64, f64)>> = solid
        .iter()
        .enumerate()
        .map(|(i, (_, pts))| {
            let Some(b) = bars.get(i) else { return Vec::new() };
            pts.iter()
                .zip(b)
                .filter(|(p, (lo, hi))| keep(p) && lo.is_finite() && hi.is_finite())
                .filter(|(_, (lo, _))| y.log.is_none() || *lo > 0.0)
                .map(|(p, &(lo, hi))| (x.map(p.0), y.map(lo), y.map(hi)))
                .collect()
        })
        .collect();
    let (solid, dashed) = (map(solid), map(dashed));
    let (mut xlo, mut xhi, mut ylo, mut yhi) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(a, b) in solid.iter().chain(&dashed).flat_map(|c| c.1.iter()) {
        (xlo, xhi, ylo, yhi) = (xlo.min(a), xhi.max(a), ylo.min(b), yhi.max(b));
    }
    for &(_, lo, hi) in mapped_bars.iter().flatten() {
        (ylo, yhi) = (ylo.min(lo), yhi.max(hi));
    }
    let vlines: Vec<(f64, &str)> = extras
        .vlines
        .iter()
        .filter(|(v, _)| v.is_finite() && (x.log.is_none() || *v > 0.0))
        .map(|(v, l)| (x.map(*v), l.as_str()))
        .collect();
    for &(v, _) in &vlines {
        (xlo, xhi) = (xlo.min(v), xhi.max(v));
    }
    let labels = solid.iter().chain(&dashed).map(|c| c.0.as_str());
    let (root, plot_area, legend_area) = canvas(path, labels)?;
    let (xr, yr) = (x.range(xlo, xhi), y.range(ylo, yhi));
    let mut ch = ChartBuilder::on(&plot_area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(xr, yr.clone())
        .map_err(|v| e(&v))?;
    let xf = |v: &f64| x.log.map_or_else(|| tick(*v), |f| f(v.exp2()));
    let yf = |v: &f64| y.log.map_or_else(|| tick(*v), |f| f(v.exp2()));
    let mut mesh = ch.configure_mesh();
    mesh.x_desc(x.desc).y_desc(y.desc).axis_desc_style(("sans-serif", 15));
    mesh.x_label_formatter(&xf).y_label_formatter(&yf);
    mesh.draw().map_err(|v| e(&v))?;
    let grey = RGBColor(0x60, 0x60, 0x60);
    for &(v, label) in &vlines {
        let (top, bottom) = (yr.end, yr.start);
        ch.draw_series(DashedLineSeries::new(vec![(v, bottom), (v, top)], 2, 4, grey.into()))
            .map_err(|err| e(&err))?;
        let at = top - (top - bottom) * 0.01;
        let font = ("sans-serif", 12).into_font().color(&grey);
        ch.draw_series(std::iter::once(
            EmptyElement::at((v, at)) + Text::new(label.to_string(), (4, 0), font),
        ))
        .map_err(|err| e(&err))?;
    }
    for (i, (_, pts)) in dashed.iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        ch.draw_series(DashedLineSeries::new(pts.clone(), 7, 5, c.stroke_width(2)))
            .map_err(|v| e(&v))?;
    }
    for (i, (_, pts)) in solid.iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        for &(bx, lo, hi) in &mapped_bars[i] {
            // A vertical line from the least to the most, capped.
            let bar = PathElement::new(vec![(bx, lo), (bx, hi)], c.stroke_width(1));
            let cap = |at: f64| {
                EmptyElement::at((bx, at))
                    + PathElement::new(vec![(-5, 0), (5, 0)], c.stroke_width(1))
            };
            ch.draw_series(std::iter::once(bar)).map_err(|v| e(&v))?;
            ch.draw_series([cap(lo), cap(hi)]).map_err(|v| e(&v))?;
        }
        ch.draw_series(LineSeries::new(pts.clone(), c.stroke_width(2))).map_err(|v| e(&v))?;
        let every = extras.marker_every.max(1);
        let marked: Vec<(f64, f64)> = if every == 1 {
            pts.clone()
        } else {
            // Curve i's markers start i/n of the way into the spacing.
            let first = (i * every / solid.len().max(1)) % every;
            pts.iter().skip(first).step_by(every).copied().collect()
        };
        markers(&mut ch, i, &marked, c).map_err(|v| e(&v))?;
    }
    // The legend, right of the plot: one entry per curve.
    let font = ("sans-serif", 14).into_font();
    let mut row = 40;
    for (i, (label, _)) in solid.iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        legend_area
            .draw(&PathElement::new(vec![(8, row), (38, row)], c.stroke_width(2)))
            .map_err(|v| e(&v))?;
        legend_marker(&legend_area, i, (23, row), c).map_err(|v| e(&v))?;
        legend_area
            .draw(&Text::new(label.clone(), (46, row - 7), font.clone()))
            .map_err(|v| e(&v))?;
        row += 22;
    }
    for (i, (label, _)) in dashed.iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        for seg in [(8, 16), (21, 29), (34, 38)] {
            legend_area
                .draw(&PathElement::new(vec![(seg.0, row), (seg.1, row)], c.stroke_width(2)))
                .map_err(|v| e(&v))?;
        }
        legend_area
            .draw(&Text::new(label.clone(), (46, row - 7), font.clone()))
            .map_err(|v| e(&v))?;
        row += 22;
    }
    root.present().map_err(|v| e(&v))
}

/// Grouped bars from 0 (a bar's length is its value): per group (its
/// label, written under it) one bar per series, `series` naming them in
/// the legend right of the plot, each series in a colour of its own.
pub fn grouped_bars(
    path: &Path,
    title: &str,
    x_desc: &str,
    y: Axis,
    series: &[&str],
    groups: &[(String, Vec<f64>)],
) -> crate::Result<()> {
    let e = |err: &dyn std::fmt::Display| format!("plot {}: {err}", path.display());
    let n = groups.len().max(1) as f64;
    let top = groups.iter().flat_map(|g| g.1.iter().copied()).fold(0.0, f64::max);
    let yr = y.range(0.0, top);
    let (root, plot_area, legend_area) = canvas(path, series.iter().copied())?;
    let mut ch = ChartBuilder::on(&plot_area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n, 0.0..yr.end)
        .map_err(|v| e(&v))?;
    let yf = |v: &f64| tick(*v);
    let none = |_: &f64| String::new();
    ch.configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .x_label_formatter(&none)
        .y_label_formatter(&yf)
        .x_desc(x_desc)
        .y_desc(y.desc)
        .axis_desc_style(("sans-serif", 15))
        .draw()
        .map_err(|v| e(&v))?;
    let colour = |k: usize| [COLOURS[4], COLOURS[1], COLOURS[3], COLOURS[5]][k % 4];
    let bar = 0.76 / series.len().max(1) as f64;
    for (i, (_, values)) in groups.iter().enumerate() {
        for (k, &v) in values.iter().enumerate().take(series.len()) {
            let x0 = i as f64 + 0.12 + k as f64 * bar;
            let rect = Rectangle::new([(x0 + 0.01, 0.0), (x0 + bar - 0.01, v)], colour(k).filled());
            ch.draw_series(std::iter::once(rect)).map_err(|v| e(&v))?;
        }
    }
    // Each group's label under it, centred.
    let style = TextStyle::from(("sans-serif", 13).into_font()).pos(
        plotters::style::text_anchor::Pos::new(
            plotters::style::text_anchor::HPos::Center,
            plotters::style::text_anchor::VPos::Top,
        ),
    );
    for (i, (label, _)) in groups.iter().enumerate() {
        let (px, py) = ch.backend_coord(&(i as f64 + 0.5, 0.0));
        plot_area
            .draw(&Text::new(label.clone(), (px, py + 6), style.clone()))
            .map_err(|v| e(&v))?;
    }
    let font = ("sans-serif", 14).into_font();
    for (k, label) in series.iter().enumerate() {
        let row = 40 + 22 * k as i32;
        legend_area
            .draw(&Rectangle::new([(12, row - 6), (30, row + 6)], colour(k).filled()))
            .map_err(|v| e(&v))?;
        legend_area
            .draw(&Text::new(label.to_string(), (46, row - 7), font.clone()))
            .map_err(|v| e(&v))?;
    }
    root.present().map_err(|v| e(&v))
}

/// What a drawn SVG says, for tests: its text elements in order.
#[cfg(test)]
pub fn svg_texts(svg: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(at) = rest.find("<text") {
        rest = &rest[at..];
        let Some(open) = rest.find('>') else { break };
        let Some(close) = rest.find("</text>") else { break };
        out.push(
            rest[open + 1..close]
                .replace("&amp;", "&")
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&quot;", "\"")
                .trim()
                .to_string(),
        );
        rest = &rest[close + 7..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plot_has_one_legend_entry_per_curve_labelled_models_and_axes_on_the_data() {
        let dir = std::env::temp_dir().join(format!("xtask-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.svg");
        let g = |f: fn(f64) -> f64| -> Vec<(f64, f64)> {
            (4..=16).step_by(2).map(|g| (g as f64, f(g as f64))).collect()
        };
        let solid =
            vec![("binomial".to_string(), g(|x| 50.0 + x)), ("binary".into(), g(|x| 40.0 + x))];
        let bars: Vec<Bars> =
            vec![g(|x| 50.0 + x).iter().map(|p| (p.1 - 2.0, p.1 + 2.0)).collect()];
        let dashed = vec![
            (model_label("binomial"), g(|x| 55.0 + x)),
            (model_label("binary"), g(|x| 45.0 + x)),
        ];
        curves_with_bars(
            &path,
            "t",
            Axis::linear("G (members)"),
            Axis::linear("latency (µs)"),
            &solid,
            &bars,
            &dashed,
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let texts = svg_texts(&svg);
        for label in ["binomial", "binary", "binomial (model)", "binary (model)"] {
            assert_eq!(texts.iter().filter(|t| *t == label).count(), 1, "{label}: {texts:?}");
        }
        assert!(texts.iter().any(|t| t == "latency (µs)"), "{texts:?}");
        assert!(texts.iter().any(|t| t == "G (members)"), "{texts:?}");
        // The x ticks start near 4 (not at 0), the y ticks near 42.
        let ticks: Vec<f64> = texts.iter().filter_map(|t| t.parse().ok()).collect();
        let x_min = ticks.iter().copied().filter(|v| *v < 20.0).fold(f64::MAX, f64::min);
        assert!((3.0..=4.0).contains(&x_min), "x from {x_min}: {ticks:?}");
        let y_min = ticks.iter().copied().filter(|v| *v > 20.0).fold(f64::MAX, f64::min);
        assert!((40.0..=46.0).contains(&y_min), "y from {y_min}: {ticks:?}");
        // No yellow, and two colours at least.
        assert!(!svg.to_uppercase().contains("#F0E442"));
        assert!(svg.contains("#E69F00") || svg.contains("#e69f00"), "Okabe-Ito orange");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_axis_spans_its_data_with_a_margin() {
        let a = Axis::linear("x");
        assert_eq!(a.range(4.0, 16.0), 3.4..16.6);
        let r = a.range(0.01, 0.09);
        assert!(r.start >= 0.0 && r.end < 0.1, "{r:?}");
        assert_eq!(a.range(5.0, 5.0), 4.0..6.0);
        assert_eq!(a.range(-2.0, 2.0), -2.2..2.2);
    }
}
