//! The plots of `report.md`: grouped bar charts (linear or log scale) and
//! line charts, drawn with `plotters` on its bitmap backend and encoded
//! with `png`.
//!
//! Text is DejaVu Sans, shipped in this crate (`fonts/DejaVuSans.ttf`, its
//! license in `fonts/DejaVuSans-LICENSE`) and registered with plotters'
//! `ab_glyph` feature, so neither building nor running needs a system font
//! library. Category labels under the bars wrap only between words (before
//! `[`, after `:`, `;`, `=` and `,`, at spaces) and shrink to fit; a word is
//! never split.

use std::ops::Range;
use std::sync::OnceLock;

use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{register_font, FontStyle};

use crate::Error;

/// An RGB colour.
pub type Rgb = [u8; 3];

const GRID: Rgb = [228, 228, 228];
const AXIS: Rgb = [60, 60, 60];
const TEXT: Rgb = [30, 30, 30];

/// Series colours (colour-blind-friendly order of the usual "tab10").
pub const PALETTE: [Rgb; 8] = [
    [31, 119, 180],
    [255, 127, 14],
    [44, 160, 44],
    [214, 39, 40],
    [148, 103, 189],
    [140, 86, 75],
    [227, 119, 194],
    [127, 127, 127],
];

/// The family name the bundled font is registered under.
const FAMILY: &str = "strata-dejavu-sans";
static FONT: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");

/// Registers the bundled font with plotters (once per process).
fn font_ready() -> Result<(), Error> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    if *REGISTERED.get_or_init(|| register_font(FAMILY, FontStyle::Normal, FONT).is_ok()) {
        Ok(())
    } else {
        Err(Error::Other(
            "plot: the bundled font fonts/DejaVuSans.ttf does not parse".into(),
        ))
    }
}

fn rgb(c: Rgb) -> RGBColor {
    RGBColor(c[0], c[1], c[2])
}

/// Text of `size` pixels (even sizes only: see [`fit_labels`]).
fn text_style(size: u32) -> TextStyle<'static> {
    (FAMILY, f64::from(size)).into_font().color(&rgb(TEXT))
}

fn centered(size: u32, v: VPos) -> TextStyle<'static> {
    text_style(size).pos(Pos::new(HPos::Center, v))
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

fn plot_err(e: impl std::fmt::Display) -> Error {
    Error::Other(format!("plot: {e}"))
}

/// Width in pixels of `s` at `size`.
fn text_w(area: &Area<'_>, s: &str, size: u32) -> Result<i32, Error> {
    if s.is_empty() {
        return Ok(0);
    }
    let (w, _) = area
        .estimate_text_size(s, &text_style(size))
        .map_err(plot_err)?;
    Ok(w as i32)
}

/// Renders a `width`×`height` image with `draw` and encodes it as PNG.
fn render(
    width: u32,
    height: u32,
    draw: impl FnOnce(&Area<'_>) -> Result<(), Error>,
) -> Result<Vec<u8>, Error> {
    font_ready()?;
    let mut rgb_buf = vec![255u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb_buf, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        draw(&root)?;
        root.present().map_err(plot_err)?;
    }
    encode_png(width, height, &rgb_buf)
}

/// An 8-bit RGB PNG of `rgb` (rows top to bottom).
fn encode_png(width: u32, height: u32, rgb_buf: &[u8]) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, width, height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::Best);
    let mut w = enc.write_header().map_err(plot_err)?;
    w.write_image_data(rgb_buf).map_err(plot_err)?;
    w.finish().map_err(plot_err)?;
    Ok(out)
}

/// Axis scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    Linear,
    Log,
}

/// One series of a bar chart: a value per group (`None`: no bar).
#[derive(Debug, Clone)]
pub struct BarSeries {
    pub name: String,
    pub values: Vec<Option<f64>>,
    /// Drawn on top of the bar in a lighter shade (e.g. index blocks on top
    /// of data blocks); the bar's total is value + stacked.
    pub stacked: Vec<Option<f64>>,
    /// A black tick across the bar at this value (e.g. a physical minimum).
    pub markers: Vec<Option<f64>>,
}

impl BarSeries {
    pub fn new(name: impl Into<String>, values: Vec<Option<f64>>) -> BarSeries {
        BarSeries {
            name: name.into(),
            values,
            stacked: Vec::new(),
            markers: Vec::new(),
        }
    }
}

/// A grouped bar chart: one cluster per group, one bar per series.
#[derive(Debug, Clone)]
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    pub groups: Vec<String>,
    pub series: Vec<BarSeries>,
    pub scale: Scale,
    /// Extra legend lines (what the shades and ticks mean).
    pub notes: Vec<String>,
}

/// One line of a line chart: (x, y) points, drawn in x order.
#[derive(Debug, Clone)]
pub struct LineSeries {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

#[derive(Debug, Clone)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<LineSeries>,
    pub scale: Scale,
}

fn ok(v: f64) -> bool {
    v.is_finite()
}

/// A y (or x) axis: maps values to pixels between `p0` (value `lo`) and
/// `p1` (value `hi`).
#[derive(Debug, Clone, Copy)]
struct Axis {
    lo: f64,
    hi: f64,
    scale: Scale,
}

impl Axis {
    /// An axis covering `values` (non-finite ones, and non-positive ones on
    /// a log axis, ignored). Linear axes start at 0 unless values go below.
    fn fit(values: impl Iterator<Item = f64>, scale: Scale, from_zero: bool) -> Axis {
        let vals: Vec<f64> = values
            .filter(|v| ok(*v) && (scale == Scale::Linear || *v > 0.0))
            .collect();
        let (mut lo, mut hi) = vals
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
                (a.min(v), b.max(v))
            });
        if vals.is_empty() {
            (lo, hi) = if scale == Scale::Log {
                (1.0, 10.0)
            } else {
                (0.0, 1.0)
            };
        }
        match scale {
            Scale::Log => {
                // Below the smallest value, so its bar has a height: the
                // power of ten under it, or one more decade down when the
                // value is within 1.5 times that power.
                let mut floor = (lo.log10() - 1e-9).floor();
                if lo < 1.5 * 10f64.powf(floor) {
                    floor -= 1.0;
                }
                let lo = 10f64.powf(floor);
                let mut hi = 10f64.powf(hi.log10().ceil());
                if hi <= lo {
                    hi = lo * 10.0;
                }
                Axis { lo, hi, scale }
            }
            Scale::Linear => {
                if from_zero {
                    lo = lo.min(0.0);
                    hi = hi.max(0.0);
                }
                if hi <= lo {
                    hi = lo + 1.0;
                }
                let step = nice_step((hi - lo) / 5.0);
                Axis {
                    lo: (lo / step).floor() * step,
                    hi: (hi / step).ceil() * step,
                    scale,
                }
            }
        }
    }

    fn ticks(&self) -> Vec<f64> {
        match self.scale {
            Scale::Log => {
                let (a, b) = (
                    self.lo.log10().round() as i32,
                    self.hi.log10().round() as i32,
                );
                let decades = b - a;
                let mut t = Vec::new();
                for e in a..=b {
                    let p = 10f64.powi(e);
                    t.push(p);
                    if decades <= 2 && e < b {
                        t.push(2.0 * p);
                        t.push(5.0 * p);
                    }
                }
                t
            }
            Scale::Linear => {
                let step = nice_step((self.hi - self.lo) / 5.0);
                let mut t = Vec::new();
                let mut v = self.lo;
                while v <= self.hi + step * 1e-9 {
                    t.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
                    v += step;
                }
                t
            }
        }
    }
}

/// The nearest of 1, 2, 5 × 10^k at or above `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw.is_nan() || raw <= 0.0 || raw.is_infinite() {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    let m = raw / p;
    let n = if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    };
    n * p
}

/// Compact number for ticks and bar labels: 0.05, 2.5, 120, 1.5k, 12M.
pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if !v.is_finite() {
        "-".into()
    } else if a >= 1e9 {
        trim(format!("{:.1}", v / 1e9)) + "G"
    } else if a >= 1e6 {
        trim(format!("{:.1}", v / 1e6)) + "M"
    } else if a >= 1e4 {
        trim(format!("{:.1}", v / 1e3)) + "k"
    } else if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        trim(format!("{v:.1}"))
    } else if a >= 0.01 {
        trim(format!("{v:.2}"))
    } else {
        format!("{v:.0e}")
    }
}

fn lighten(c: Rgb) -> Rgb {
    c.map(|x| (u16::from(x) + 2 * 255).div_euclid(3) as u8)
}

/// Break opportunities of a category label: the pieces that stay whole.
/// A break may come before `[`, after `:`, `;`, `=` or `,`, and at spaces
/// (which are dropped at a line start or end).
fn pieces(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in s.chars() {
        if (c == '[' || c == ' ') && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        cur.push(c);
        if matches!(c, ':' | ';' | '=' | ',') {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Packs the pieces of `s` into lines at most `max_px` wide (as measured
/// by `width`), never splitting a piece: a piece wider than `max_px`
/// gets a line of its own.
fn wrap(s: &str, max_px: i32, width: &mut dyn FnMut(&str) -> i32) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut cur = String::new();
    for p in pieces(s) {
        let joined = format!("{cur}{p}");
        if cur.trim().is_empty() || width(joined.trim()) <= max_px {
            cur = joined;
        } else {
            lines.push(cur.trim().to_string());
            cur = p.trim_start().to_string();
        }
    }
    if !cur.trim().is_empty() || lines.is_empty() {
        lines.push(cur.trim().to_string());
    }
    lines
}

/// Category labels wrapped to `max_px`: the largest font size (12, 10 or
/// 8) at which every line fits in at most 3 lines; the smallest otherwise.
/// Sizes are even: plotters' glyph placement rounds half a size, and an odd
/// size puts glyphs of one line half a pixel apart.
fn fit_labels(
    area: &Area<'_>,
    labels: &[String],
    max_px: i32,
) -> Result<(u32, Vec<Vec<String>>), Error> {
    let mut last = (8, Vec::new());
    for size in [12, 10, 8] {
        let mut err = None;
        let mut measure = |s: &str| {
            text_w(area, s, size).unwrap_or_else(|e| {
                err = Some(e);
                0
            })
        };
        let wrapped: Vec<Vec<String>> = labels
            .iter()
            .map(|l| wrap(l, max_px, &mut measure))
            .collect();
        if let Some(e) = err {
            return Err(e);
        }
        let fits = wrapped.iter().all(|ls| {
            ls.len() <= 3
                && ls
                    .iter()
                    .all(|l| text_w(area, l, size).is_ok_and(|w| w <= max_px))
        });
        last = (size, wrapped);
        if fits {
            break;
        }
    }
    Ok(last)
}

/// Draws the legend as rows of (swatch, name) flowing left to right from
/// (x, y) within `w` pixels, then the notes one per line; returns the
/// height used. With `draw` false it only measures.
fn legend(
    area: &Area<'_>,
    (x, y, w): (i32, i32, i32),
    items: &[(String, Rgb)],
    notes: &[String],
    draw: bool,
) -> Result<i32, Error> {
    const SIZE: u32 = 12;
    const LINE_H: i32 = 17;
    let (mut cx, mut cy) = (x, y);
    let style = text_style(SIZE).pos(Pos::new(HPos::Left, VPos::Center));
    for (name, col) in items {
        let iw = 16 + text_w(area, name, SIZE)? + 18;
        if cx > x && cx + iw > x + w {
            cx = x;
            cy += LINE_H;
        }
        if draw {
            area.draw(&Rectangle::new(
                [(cx, cy + 3), (cx + 11, cy + 12)],
                rgb(*col).filled(),
            ))
            .map_err(plot_err)?;
            area.draw_text(name, &style, (cx + 16, cy + 8))
                .map_err(plot_err)?;
        }
        cx += iw;
    }
    for n in notes {
        if !items.is_empty() || cy > y {
            cy += LINE_H;
        }
        if draw {
            area.draw_text(n, &style, (x, cy + 8)).map_err(plot_err)?;
        }
    }
    Ok(if items.is_empty() && notes.is_empty() {
        0
    } else {
        cy - y + LINE_H
    })
}

/// Title and legend at the top of `area`; returns the area below them.
fn header<'a>(
    area: &Area<'a>,
    title: &str,
    items: &[(String, Rgb)],
    notes: &[String],
) -> Result<Area<'a>, Error> {
    let (w, _) = area.dim_in_pixel();
    let w = w as i32;
    area.draw_text(title, &centered(20, VPos::Top), (w / 2, 8))
        .map_err(plot_err)?;
    let place = (62, 38, w - 80);
    let lh = legend(area, place, items, notes, false)?;
    legend(area, place, items, notes, true)?;
    Ok(area.split_vertically(38 + lh + 6).1)
}

/// A plotters axis with this module's ticks ([`Axis::ticks`]) and labels
/// ([`fmt_num`]): values are in axis units (log10 of the value on a log
/// axis), mapped linearly.
#[derive(Debug, Clone)]
struct Ticked {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
    scale: Scale,
}

impl Ticked {
    fn new(axis: &Axis) -> Ticked {
        let t = |v: f64| to_axis(axis.scale, v);
        Ticked {
            lo: t(axis.lo),
            hi: t(axis.hi),
            ticks: axis.ticks().into_iter().map(t).collect(),
            scale: axis.scale,
        }
    }
}

impl Ranged for Ticked {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let span = self.hi - self.lo;
        let f = if span > 0.0 {
            (v - self.lo) / span
        } else {
            0.0
        };
        limit.0 + (f * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        self.ticks.clone()
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

impl ValueFormatter<f64> for Ticked {
    fn format_ext(&self, v: &f64) -> String {
        fmt_num(from_axis(self.scale, *v))
    }
}

/// The value-to-axis transform of a scale (log10 on a log axis).
fn to_axis(scale: Scale, v: f64) -> f64 {
    match scale {
        Scale::Linear => v,
        Scale::Log => v.log10(),
    }
}

fn from_axis(scale: Scale, v: f64) -> f64 {
    match scale {
        Scale::Linear => v,
        Scale::Log => 10f64.powf(v),
    }
}

/// Draws a grouped bar chart into `area`; `root` is the whole image (bar
/// values and category labels are placed in its pixel coordinates).
fn draw_bar_chart(root: &Area<'_>, area: &Area<'_>, chart: &BarChart) -> Result<(), Error> {
    let items: Vec<(String, Rgb)> = chart
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.clone(), PALETTE[i % PALETTE.len()]))
        .collect();
    let body = header(area, &chart.title, &items, &chart.notes)?;

    let at = |v: &Vec<Option<f64>>, g: usize| v.get(g).copied().flatten().filter(|x| ok(*x));
    let mut all = Vec::new();
    for s in &chart.series {
        for g in 0..chart.groups.len() {
            if let Some(v) = at(&s.values, g) {
                all.push(v + at(&s.stacked, g).unwrap_or(0.0));
                all.push(v);
            }
            all.extend(at(&s.markers, g));
        }
    }
    let axis = Axis::fit(all.into_iter(), chart.scale, true);
    let t = |v: f64| to_axis(chart.scale, v);

    // Category labels: wrapped to the width of a group before the chart is
    // built, so the space under the axis fits them.
    const Y_AREA: i32 = 72;
    const RIGHT: i32 = 14;
    const LEFT: i32 = 4;
    let ng = chart.groups.len().max(1);
    let (bw_px, _) = body.dim_in_pixel();
    let group_px = (bw_px as i32 - LEFT - Y_AREA - RIGHT) / ng as i32;
    let (label_size, labels) = fit_labels(root, &chart.groups, group_px - 6)?;
    let line_h = label_size as i32 + 4;
    let lines = labels.iter().map(Vec::len).max().unwrap_or(0) as i32;

    let mut ctx = ChartBuilder::on(&body)
        .margin_top(8)
        .margin_left(LEFT)
        .margin_right(RIGHT)
        .x_label_area_size(10 + lines * line_h)
        .y_label_area_size(Y_AREA)
        .build_cartesian_2d(0f64..ng as f64, Ticked::new(&axis))
        .map_err(plot_err)?;
    ctx.configure_mesh()
        .disable_x_mesh()
        .disable_x_axis()
        .bold_line_style(rgb(GRID))
        .light_line_style(rgb(GRID))
        .axis_style(rgb(AXIS))
        .y_label_style(text_style(12))
        .y_desc(chart.y_label.as_str())
        .axis_desc_style(text_style(12))
        .draw()
        .map_err(plot_err)?;

    let (xr, yr) = ctx.plotting_area().get_pixel_range();
    let bottom = yr.end - 1;
    let gw = (xr.end - xr.start) as f64 / ng as f64;
    let ns = chart.series.len().max(1) as f64;
    let bw = ((gw - 12.0) / ns).clamp(2.0, 60.0);
    let px = 1.0 / gw; // one pixel in group units
    let base = t(axis.lo);
    // Narrow bars get smaller value labels (a label wider than its bar is
    // left out).
    let value_size = if bw >= 24.0 { 12 } else { 10 };
    let value_style = centered(value_size, VPos::Bottom);
    for (g, _) in chart.groups.iter().enumerate() {
        let x0 = g as f64 + (gw - bw * ns) / 2.0 * px;
        for (i, s) in chart.series.iter().enumerate() {
            let col = PALETTE[i % PALETTE.len()];
            let Some(v) = at(&s.values, g) else { continue };
            if chart.scale == Scale::Log && v <= 0.0 {
                continue;
            }
            let (l, r) = (
                x0 + i as f64 * bw * px + px,
                x0 + (i as f64 + 1.0) * bw * px - 2.0 * px,
            );
            let mut shapes = vec![Rectangle::new([(l, base), (r, t(v))], rgb(col).filled())];
            let mut top = t(v);
            if let Some(st) = at(&s.stacked, g).filter(|x| *x > 0.0) {
                shapes.push(Rectangle::new(
                    [(l, t(v)), (r, t(v + st))],
                    rgb(lighten(col)).filled(),
                ));
                top = t(v + st);
            }
            ctx.draw_series(shapes).map_err(plot_err)?;
            let (cx, mut label_y) = ctx.backend_coord(&((l + r) / 2.0, top));
            if let Some(m) = at(&s.markers, g).filter(|m| chart.scale == Scale::Linear || *m > 0.0)
            {
                let (mx0, my) = ctx.backend_coord(&(l, t(m)));
                let (mx1, _) = ctx.backend_coord(&(r, t(m)));
                root.draw(&Rectangle::new(
                    [(mx0 - 2, my - 1), (mx1 + 2, my)],
                    BLACK.filled(),
                ))
                .map_err(plot_err)?;
                label_y = label_y.min(my - 1);
            }
            let lab = fmt_num(v + at(&s.stacked, g).unwrap_or(0.0));
            if f64::from(text_w(root, &lab, value_size)?) <= bw + 2.0 {
                root.draw_text(&lab, &value_style, (cx, label_y - 2))
                    .map_err(plot_err)?;
            }
        }
    }
    for (g, ls) in labels.iter().enumerate() {
        let cx = xr.start + ((g as f64 + 0.5) * gw).round() as i32;
        for (k, line) in ls.iter().enumerate() {
            root.draw_text(
                line,
                &centered(label_size, VPos::Top),
                (cx, bottom + 6 + k as i32 * line_h),
            )
            .map_err(plot_err)?;
        }
    }
    root.draw(&PathElement::new(
        vec![(xr.start, bottom), (xr.end - 1, bottom)],
        rgb(AXIS),
    ))
    .map_err(plot_err)
}

/// Draws a line chart into `area`.
fn draw_line_chart(area: &Area<'_>, chart: &LineChart) -> Result<(), Error> {
    let items: Vec<(String, Rgb)> = chart
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.clone(), PALETTE[i % PALETTE.len()]))
        .collect();
    let body = header(area, &chart.title, &items, &[])?;
    let pts = || chart.series.iter().flat_map(|s| s.points.iter());
    let yaxis = Axis::fit(pts().map(|p| p.1), chart.scale, true);
    let xaxis = Axis::fit(pts().map(|p| p.0), Scale::Linear, true);
    let scale = chart.scale;
    let t = |v: f64| to_axis(scale, v);
    let mut ctx = ChartBuilder::on(&body)
        .margin_top(8)
        .margin_left(4)
        .margin_right(24)
        .x_label_area_size(40)
        .y_label_area_size(72)
        .build_cartesian_2d(Ticked::new(&xaxis), Ticked::new(&yaxis))
        .map_err(plot_err)?;
    ctx.configure_mesh()
        .bold_line_style(rgb(GRID))
        .light_line_style(rgb(GRID))
        .axis_style(rgb(AXIS))
        .label_style(text_style(12))
        .x_desc(chart.x_label.as_str())
        .y_desc(chart.y_label.as_str())
        .axis_desc_style(text_style(12))
        .draw()
        .map_err(plot_err)?;
    for (i, s) in chart.series.iter().enumerate() {
        let col = rgb(PALETTE[i % PALETTE.len()]);
        let mut p: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(x, y)| ok(*x) && ok(*y) && (scale == Scale::Linear || *y > 0.0))
            .map(|(x, y)| (x, t(y)))
            .collect();
        p.sort_by(|a, b| a.0.total_cmp(&b.0));
        ctx.draw_series(plotters::series::LineSeries::new(
            p.clone(),
            col.stroke_width(2),
        ))
        .map_err(plot_err)?;
        ctx.draw_series(
            p.into_iter()
                .map(|xy| EmptyElement::at(xy) + Rectangle::new([(-2, -2), (2, 2)], col.filled())),
        )
        .map_err(plot_err)?;
    }
    Ok(())
}

/// A bar chart as a PNG of `width`×`height` pixels.
pub fn bar_chart_png(chart: &BarChart, width: u32, height: u32) -> Result<Vec<u8>, Error> {
    bar_charts_png(&[chart], width, height)
}

/// Bar charts side by side, in equal columns, as one PNG.
pub fn bar_charts_png(charts: &[&BarChart], width: u32, height: u32) -> Result<Vec<u8>, Error> {
    render(width, height, |root| {
        let cols = root.split_evenly((1, charts.len().max(1)));
        for (chart, area) in charts.iter().zip(&cols) {
            draw_bar_chart(root, area, chart)?;
        }
        Ok(())
    })
}

/// A line chart as a PNG of `width`×`height` pixels.
pub fn line_chart_png(chart: &LineChart, width: u32, height: u32) -> Result<Vec<u8>, Error> {
    render(width, height, |root| draw_line_chart(root, chart))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// PNG signature.
    pub(crate) const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];

    /// (width, height, RGB pixels) of a PNG written by [`encode_png`].
    pub(crate) fn decode(png_bytes: &[u8]) -> (usize, usize, Vec<u8>) {
        let mut reader = png::Decoder::new(png_bytes).read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!(info.color_type, png::ColorType::Rgb);
        buf.truncate(info.buffer_size());
        (info.width as usize, info.height as usize, buf)
    }

    fn non_white(png_bytes: &[u8]) -> (usize, usize, usize, usize) {
        assert_eq!(&png_bytes[..8], &PNG_SIGNATURE);
        let (w, h, px) = decode(png_bytes);
        let colored = px
            .chunks(3)
            .filter(|p| p[0] != p[1] || p[1] != p[2])
            .count();
        let ink = px.chunks(3).filter(|p| *p != [255, 255, 255]).count();
        (w, h, colored, ink)
    }

    #[test]
    fn bar_chart_renders() {
        let mut s0 = BarSeries::new("next", vec![Some(2.0), Some(12.7), Some(118.0)]);
        s0.markers = vec![Some(1.0), Some(10.0), Some(100.0)];
        s0.stacked = vec![Some(0.5), None, Some(40.0)];
        let s1 = BarSeries::new("memory", vec![Some(1.2), None, Some(107.0)]);
        for scale in [Scale::Log, Scale::Linear] {
            let chart = BarChart {
                title: "user_id: mean latency".into(),
                y_label: "ms".into(),
                groups: vec!["small".into(), "medium".into(), "large".into()],
                series: vec![s0.clone(), s1.clone()],
                scale,
                notes: vec!["black tick: physical minimum".into()],
            };
            let (w, h, colored, ink) = non_white(&bar_chart_png(&chart, 640, 360).unwrap());
            assert_eq!((w, h), (640, 360));
            assert!(colored > 2000, "bars drawn: {colored}");
            assert!(ink > colored, "text and axes drawn");
        }
        // No data at all still gives a valid, framed image.
        let empty = BarChart {
            title: "empty".into(),
            y_label: String::new(),
            groups: Vec::new(),
            series: Vec::new(),
            scale: Scale::Log,
            notes: Vec::new(),
        };
        let (w, h, _, ink) = non_white(&bar_chart_png(&empty, 200, 150).unwrap());
        assert_eq!((w, h), (200, 150));
        assert!(ink > 0);
    }

    #[test]
    fn line_chart_renders() {
        let chart = LineChart {
            title: "mixed".into(),
            x_label: "operations".into(),
            y_label: "us".into(),
            series: vec![
                LineSeries {
                    name: "next".into(),
                    points: vec![(500.0, 30.0), (1000.0, 45.0), (1500.0, 41.0)],
                },
                LineSeries {
                    name: "memory".into(),
                    points: vec![(500.0, 20.0), (1000.0, f64::NAN), (1500.0, 60.0)],
                },
            ],
            scale: Scale::Linear,
        };
        let (w, h, colored, ink) = non_white(&line_chart_png(&chart, 500, 300).unwrap());
        assert_eq!((w, h), (500, 300));
        assert!(colored > 300, "lines drawn: {colored}");
        assert!(ink > colored);
    }

    #[test]
    fn labels_wrap_between_words_only() {
        // One pixel per character: the breaks are the only freedom.
        let mut w = |s: &str| s.chars().count() as i32;
        assert_eq!(
            wrap("strata:composite[mode=validation]", 12, &mut w),
            vec!["strata:", "composite", "[mode=", "validation]"]
        );
        assert_eq!(
            wrap("strata:composite[mode=validation]", 16, &mut w),
            vec!["strata:composite", "[mode=", "validation]"]
        );
        // A word wider than the line stays whole.
        assert_eq!(wrap("composite", 4, &mut w), vec!["composite"]);
        assert_eq!(wrap("a b", 10, &mut w), vec!["a b"]);
        assert_eq!(wrap("", 10, &mut w), vec![""]);
        for label in [
            "strata:next[delta=off;delta@user_id=1000]",
            "strata:posting-eager",
        ] {
            for max in 1..40 {
                let lines = wrap(label, max, &mut w);
                assert_eq!(lines.concat(), label.replace(' ', ""), "{label} at {max}");
            }
        }
    }

    #[test]
    fn axes_and_numbers() {
        let a = Axis::fit([17.0, 18_000.0].into_iter(), Scale::Log, true);
        assert_eq!((a.lo, a.hi), (10.0, 100_000.0));
        assert_eq!(a.ticks(), vec![10.0, 100.0, 1000.0, 10_000.0, 100_000.0]);
        // A value on a power of ten still gets a bar: the axis starts a decade lower.
        let b = Axis::fit([10.0, 300.0].into_iter(), Scale::Log, true);
        assert_eq!((b.lo, b.hi), (1.0, 1000.0));
        let c = Axis::fit([0.104, 0.5].into_iter(), Scale::Log, true);
        assert_eq!(c.lo, 0.01);
        let l = Axis::fit([3.0, 97.0].into_iter(), Scale::Linear, true);
        assert_eq!((l.lo, l.hi), (0.0, 100.0));
        assert_eq!(l.ticks().len(), 6);
        assert_eq!(fmt_num(0.0), "0");
        assert_eq!(fmt_num(2.5), "2.5");
        assert_eq!(fmt_num(118.2), "118");
        assert_eq!(fmt_num(15_015.0), "15k");
        assert_eq!(fmt_num(2_000_000.0), "2M");
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(130.0), 200.0);
    }
}
