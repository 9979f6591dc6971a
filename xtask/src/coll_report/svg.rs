//! The collectives report's plots: every scheme x algorithm of one
//! profile, an algorithm one colour, the NIC's lines solid with filled
//! dots, the hosts' dashed with hollow ones, the assisted scheme's dotted
//! with hollow ones, the legend (one entry per line) right of the plot
//! (plotters, SVG back end).
//! The x axis is logarithmic (group or vector size: ticks on powers of
//! two); the y axis linear over the data, or logarithmic from the lowest
//! point.

use std::path::Path;

use plotters::prelude::*;

use super::run::{Kind, Results};
use super::{ALLREDUCE_ALGS, BARRIER_ALGS, SCHEMES};

/// An algorithm's colour, by its place in its kind's list: Okabe-Ito
/// blue, orange and bluish green (`plot::COLOURS`), apart for readers
/// with any common colour-vision deficiency.
const COLOURS: [RGBColor; 3] =
    [crate::plot::COLOURS[4], crate::plot::COLOURS[1], crate::plot::COLOURS[3]];

/// How a plot's axes are drawn: descriptions (with units) and tick
/// labels of the values (x: always logarithmic).
pub struct Axes {
    pub title: String,
    pub x_desc: &'static str,
    pub x_fmt: fn(f64) -> String,
    pub y_desc: &'static str,
    /// None: linear from 0; Some: logarithmic, ticks labelled so.
    pub y_log: Option<fn(f64) -> String>,
}

/// One line: (label, scheme index, algorithm index, points).
type Line = (String, usize, usize, Vec<(f64, f64)>);

/// Plot one profile's `kind` over `points` ((n, elements) each; `xv`
/// gives the x value) into `path`.
pub fn schemes(
    path: &Path,
    axes: &Axes,
    r: &Results,
    profile: &str,
    kind: Kind,
    points: &[(u16, u32)],
    xv: impl Fn(u16, u32) -> f64,
) -> crate::Result<()> {
    let algs: &[&str] = if kind == Kind::Barrier { &BARRIER_ALGS } else { &ALLREDUCE_ALGS };
    let mut lines: Vec<Line> = Vec::new();
    for (si, scheme) in SCHEMES.iter().enumerate() {
        for (ai, alg) in algs.iter().enumerate() {
            if !points.iter().any(|&(n, e)| super::runs(scheme, alg, kind, n, e)) {
                continue;
            }
            let pts = points
                .iter()
                .filter_map(|&(n, e)| r.us(profile, kind, scheme, alg, n, e).map(|t| (xv(n, e), t)))
                .filter(|&(x, y)| x > 0.0 && y > 0.0)
                .collect();
            lines.push((format!("{scheme} {alg}"), si, ai, pts));
        }
    }
    draw(path, axes, &lines)
}

fn draw(path: &Path, axes: &Axes, lines: &[Line]) -> crate::Result<()> {
    let e = |err: &dyn std::fmt::Display| format!("plot {}: {err}", path.display());
    let ylog = axes.y_log.is_some();
    let my = |v: f64| if ylog { v.log2() } else { v };
    let all = lines.iter().flat_map(|l| l.3.iter());
    let (mut xlo, mut xhi, mut ylo, mut yhi) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all {
        (xlo, xhi) = (xlo.min(x.log2()), xhi.max(x.log2()));
        (ylo, yhi) = (ylo.min(my(y)), yhi.max(my(y)));
    }
    if xlo > xhi {
        (xlo, xhi, ylo, yhi) = (0.0, 1.0, 0.0, 1.0);
    }
    let xr = (xlo - 0.3)..(xhi + 0.3);
    // A linear axis spans the data with a 5% margin (stopping at 0), not
    // from 0: times a few microseconds apart stay apart.
    let yr = if ylog {
        (ylo - 0.3)..(yhi + 0.3).max(ylo + 0.6)
    } else {
        let pad = if yhi > ylo { (yhi - ylo) * 0.05 } else { (yhi.abs() * 0.1).max(1.0) };
        (ylo - pad).max(0.0)..yhi + pad
    };
    let root = SVGBackend::new(path, (1040, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|v| e(&v))?;
    // The legend in a panel right of the plot, where it covers no point.
    let (plot_area, legend_area) = root.split_horizontally(820);
    let mut ch = ChartBuilder::on(&plot_area)
        .caption(&axes.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(xr, yr)
        .map_err(|v| e(&v))?;
    let xf = |v: &f64| (axes.x_fmt)(v.exp2());
    let yf = |v: &f64| axes.y_log.map_or_else(|| crate::plot::tick(*v), |f| f(v.exp2()));
    ch.configure_mesh()
        .x_desc(axes.x_desc)
        .y_desc(axes.y_desc)
        .x_label_formatter(&xf)
        .y_label_formatter(&yf)
        .draw()
        .map_err(|v| e(&v))?;
    let font = ("sans-serif", 14).into_font();
    for (row, (label, scheme, alg, pts)) in lines.iter().enumerate() {
        let c = COLOURS[alg % COLOURS.len()];
        let pts: Vec<(f64, f64)> = pts.iter().map(|&(x, y)| (x.log2(), my(y))).collect();
        let line = c.stroke_width(2);
        let y = 40 + 22 * row as i32;
        if *scheme == 0 {
            ch.draw_series(LineSeries::new(pts.clone(), line)).map_err(|v| e(&v))?;
            ch.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
                .map_err(|v| e(&v))?;
            legend_area.draw(&PathElement::new(vec![(8, y), (32, y)], line)).map_err(|v| e(&v))?;
            legend_area.draw(&Circle::new((20, y), 4, c.filled())).map_err(|v| e(&v))?;
        } else {
            // Host dashed, assisted dotted.
            let (dash, gap) = if *scheme == 1 { (7, 5) } else { (2, 4) };
            ch.draw_series(DashedLineSeries::new(pts.clone(), dash, gap, line))
                .map_err(|v| e(&v))?;
            ch.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.stroke_width(2))))
                .map_err(|v| e(&v))?;
            let mut x = 8;
            while x < 32 {
                let to = (x + dash).min(32);
                legend_area
                    .draw(&PathElement::new(vec![(x, y), (to, y)], line))
                    .map_err(|v| e(&v))?;
                x = to + gap;
            }
            legend_area.draw(&Circle::new((20, y), 4, c.stroke_width(2))).map_err(|v| e(&v))?;
        }
        legend_area
            .draw(&Text::new(label.clone(), (40, y - 7), font.clone()))
            .map_err(|v| e(&v))?;
    }
    root.present().map_err(|v| e(&v))
}
