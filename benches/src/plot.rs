//! SVG and PNG plots of a run's rows: throughput against the swept axis, one line per
//! algorithm (or operation), in the papers' style: sizes on a log2 axis, labelled axes, a
//! legend beside the chart. PNG text uses the embedded DejaVu Sans subset (no system fonts
//! or fontconfig needed).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ab_glyph::{Font, FontRef, ScaleFont, point};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind,
};

use crate::error::{BenchError, Result};
use crate::report::{Row, Value, distinct};

/// What a subcommand plots.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlotSpec {
    /// The table whose rows are plotted.
    pub(crate) table: &'static str,
    /// The x field when no swept axis varies (a size column of the rows).
    pub(crate) x: &'static str,
    /// Its axis label.
    pub(crate) x_label: &'static str,
    /// The y fields: each a line per series.
    pub(crate) y: &'static [&'static str],
    /// The y axis label.
    pub(crate) y_label: &'static str,
    /// Fields naming a line (with any swept axis other than x that varies).
    pub(crate) series: &'static [&'static str],
}

const FONT: &[u8] = include_bytes!("../assets/DejaVuSans-subset.ttf");
/// Line colours that read on white (matplotlib's "tab10"), cycled.
const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];
const SIZE: (u32, u32) = (1000, 520);
const LEGEND_WIDTH: u32 = 230;

/// One line of a plot.
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
}

/// The embedded font, parsed once and registered with plotters (which lays text out with it).
fn font() -> Option<&'static FontRef<'static>> {
    static PARSED: OnceLock<Option<FontRef<'static>>> = OnceLock::new();
    PARSED
        .get_or_init(|| {
            plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).ok()?;
            FontRef::try_from_slice(FONT).ok()
        })
        .as_ref()
}

/// Everything drawn.
struct Chart {
    title: String,
    x_label: String,
    y_label: String,
    log2: bool,
    series: Vec<Series>,
}

/// Writes `<dir>/<stem>.svg` and `.png` of `rows` as `spec` says and returns their paths;
/// none when no axis varies numerically (a single-size run has nothing to plot).
///
/// # Errors
/// [`BenchError::File`] when drawing or writing a plot fails.
pub(crate) fn plot(
    rows: &[&Row],
    spec: &PlotSpec,
    axes: &[String],
    title: &str,
    dir: &Path,
    stem: &str,
) -> Result<Vec<PathBuf>> {
    let rows: Vec<&Row> = rows
        .iter()
        .copied()
        .filter(|r| r.table() == spec.table)
        .collect();
    let Some(chart) = chart(&rows, spec, axes, title) else {
        return Ok(Vec::new());
    };
    let fail = |path: &Path| {
        let path = path.to_path_buf();
        move |e: String| BenchError::File {
            path,
            message: format!("cannot draw the plot: {e}"),
        }
    };
    let svg = dir.join(format!("{stem}.svg"));
    if font().is_none() {
        return Err(fail(&svg)("the embedded font does not load".into()));
    }
    let mut text = String::new();
    draw(
        SVGBackend::with_string(&mut text, SIZE).into_drawing_area(),
        &chart,
    )
    .map_err(fail(&svg))?;
    std::fs::write(&svg, text).map_err(|source| BenchError::Io {
        path: svg.clone(),
        source,
    })?;

    let png = dir.join(format!("{stem}.png"));
    let mut pixels = vec![0u8; (SIZE.0 * SIZE.1 * 3) as usize];
    let bitmap = Bitmap(BitMapBackend::with_buffer(&mut pixels, SIZE));
    draw(bitmap.into_drawing_area(), &chart).map_err(fail(&png))?;
    write_png(&png, &pixels, SIZE).map_err(fail(&png))?;
    Ok(vec![svg, png])
}

/// The lines to draw: x is the first axis (swept, then `spec.x`) whose values are numbers
/// and vary; a line per distinct value of the series fields that vary.
fn chart(rows: &[&Row], spec: &PlotSpec, axes: &[String], title: &str) -> Option<Chart> {
    let values = |name: &str| distinct(rows.iter().filter_map(|r| r.get(name)));
    let numeric_axis = |name: &str| {
        let d = values(name);
        d.len() >= 2 && d.iter().all(|v| v.number().is_some())
    };
    let x = axes
        .iter()
        .map(String::as_str)
        .chain([spec.x])
        .find(|n| numeric_axis(n))?;
    let mut keys: Vec<&str> = Vec::new();
    for k in spec
        .series
        .iter()
        .copied()
        .chain(axes.iter().map(String::as_str))
    {
        if k != x && !keys.contains(&k) && values(k).len() >= 2 {
            keys.push(k);
        }
    }
    let mut series: Vec<Series> = Vec::new();
    for r in rows {
        let Some(xv) = r.get(x).and_then(Value::number) else {
            continue;
        };
        let name: Vec<String> = keys
            .iter()
            .filter_map(|k| r.get(k))
            .map(|v| match v {
                Value::Text(s) => s.clone(),
                v => v.number().map_or(String::new(), |n| n.to_string()),
            })
            .collect();
        for y in spec.y {
            let Some(yv) = r.get(y).and_then(Value::number) else {
                continue;
            };
            let mut label = name.join(" ");
            if spec.y.len() > 1 || label.is_empty() {
                label = format!("{label} {y}").trim().to_string();
            }
            match series.iter_mut().find(|s| s.label == label) {
                Some(s) => s.points.push((xv, yv)),
                None => series.push(Series {
                    label,
                    points: vec![(xv, yv)],
                }),
            }
        }
    }
    for s in &mut series {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    let (lo, hi) = xs
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), &v| (l.min(v), h.max(v)));
    let log2 = lo > 0.0 && hi / lo >= 4.0;
    if log2 {
        for s in &mut series {
            s.points.iter_mut().for_each(|p| p.0 = p.0.log2());
        }
    }
    let x_label = if x == spec.x { spec.x_label } else { x };
    Some(Chart {
        title: title.to_string(),
        x_label: format!("{x_label}{}", if log2 { " (log2 scale)" } else { "" }),
        y_label: spec.y_label.to_string(),
        log2,
        series,
    })
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    c: &Chart,
) -> std::result::Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let (plot_area, legend) = root.split_horizontally(SIZE.0 - LEGEND_WIDTH);
    let points = || c.series.iter().flat_map(|s| s.points.iter());
    let (x0, x1) = points().fold((f64::MAX, f64::MIN), |(l, h), p| (l.min(p.0), h.max(p.0)));
    let y1 = points().fold(0f64, |h, p| h.max(p.1));
    let pad = if c.log2 { 0.25 } else { (x1 - x0) * 0.04 };
    // The title (command, device, revision) is centred over the plot area: shrink it to fit
    // (about 0.55 em a character) so that a long device name is not cut at the left edge.
    let room = f64::from(SIZE.0 - LEGEND_WIDTH) / (0.55 * c.title.chars().count().max(1) as f64);
    let caption_size = room.clamp(10.0, 20.0);
    let mut chart = ChartBuilder::on(&plot_area)
        .caption(&c.title, ("sans-serif", caption_size))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d((x0 - pad)..(x1 + pad), 0f64..(y1 * 1.08).max(1e-9))
        .map_err(e)?;
    let log2 = c.log2;
    let x_ticks = |v: &f64| {
        if log2 {
            format!("2^{}", v.round())
        } else {
            format!("{v}")
        }
    };
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(c.x_label.as_str())
        .y_desc(c.y_label.as_str())
        .x_label_formatter(&x_ticks)
        .axis_desc_style(("sans-serif", 15))
        .label_style(("sans-serif", 13))
        .light_line_style(WHITE);
    if log2 {
        mesh.x_labels(((x1 - x0).round() as usize + 1).min(16));
    }
    mesh.draw().map_err(e)?;
    for (i, s) in c.series.iter().enumerate() {
        let line = Color::stroke_width(&COLORS[i % COLORS.len()], 2);
        chart
            .draw_series(LineSeries::new(s.points.iter().copied(), line).point_size(3))
            .map_err(e)?;
        let y = 40 + 20 * i as i32;
        legend
            .draw(&PathElement::new(vec![(4, y), (28, y)], line))
            .map_err(e)?;
        legend
            .draw(&Text::new(
                s.label.clone(),
                (34, y - 7),
                ("sans-serif", 14).into_font(),
            ))
            .map_err(e)?;
    }
    root.present().map_err(e)
}

/// plotters' bitmap backend with text drawn where the glyphs belong: plotters' ab_glyph text
/// puts each glyph's ink at the pen position, ignoring side bearings (a gap opens before a
/// `J`, whose bearing is negative). Everything else is the bitmap backend's.
struct Bitmap<'a>(BitMapBackend<'a>);

impl<'a> DrawingBackend for Bitmap<'a> {
    type ErrorType = <BitMapBackend<'a> as DrawingBackend>::ErrorType;
    fn get_size(&self) -> (u32, u32) {
        self.0.get_size()
    }
    fn ensure_prepared(&mut self) -> std::result::Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.ensure_prepared()
    }
    fn present(&mut self) -> std::result::Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.present()
    }
    fn draw_pixel(
        &mut self,
        p: BackendCoord,
        c: BackendColor,
    ) -> std::result::Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_pixel(p, c)
    }
    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> std::result::Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_line(from, to, style)
    }
    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> std::result::Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_rect(upper_left, bottom_right, style, fill)
    }
    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        size: (u32, u32),
        src: &[u8],
    ) -> std::result::Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.blit_bitmap(pos, size, src)
    }

    /// The text laid out on a baseline at the font's ascent (advances and kerning as
    /// plotters measures them), each glyph at its bounds, then anchored and rotated.
    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> std::result::Result<(), DrawingErrorKind<Self::ErrorType>> {
        let Some(font) = font() else {
            return Ok(()); // `plot` checks the font before drawing
        };
        let scaled = font.as_scaled(style.size() as f32);
        let mut ink: Vec<(i32, i32, f32)> = Vec::new();
        let (mut x, mut prev) = (0f32, None);
        for c in text.chars() {
            let id = scaled.glyph_id(c);
            if let Some(p) = prev {
                x += scaled.kern(p, id);
            }
            let glyph = id.with_scale_and_position(scaled.scale(), point(x, scaled.ascent()));
            if let Some(outline) = scaled.outline_glyph(glyph) {
                let b = outline.px_bounds();
                outline.draw(|gx, gy, cover| {
                    ink.push((
                        b.min.x as i32 + gx as i32,
                        b.min.y as i32 + gy as i32,
                        cover,
                    ));
                });
            }
            x += scaled.h_advance(id);
            prev = Some(id);
        }
        let (width, height) = (x.round() as i32, scaled.height().round() as i32);
        let anchor = style.anchor();
        let dx = match anchor.h_pos {
            HPos::Left => 0,
            HPos::Center => -width / 2,
            HPos::Right => -width,
        };
        let dy = match anchor.v_pos {
            VPos::Top => 0,
            VPos::Center => -height / 2,
            VPos::Bottom => -height,
        };
        let (color, turn) = (style.color(), style.transform());
        for (x, y, cover) in ink {
            let (x, y) = turn.transform(x + dx, y + dy);
            let c = BackendColor {
                alpha: color.alpha * f64::from(cover),
                rgb: color.rgb,
            };
            self.0.draw_pixel((pos.0 + x, pos.1 + y), c)?;
        }
        Ok(())
    }
}

fn write_png(path: &Path, rgb: &[u8], size: (u32, u32)) -> std::result::Result<(), String> {
    let file = std::fs::File::create(path).map_err(|e| e.to_string())?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), size.0, size.1);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header().map_err(|e| e.to_string())?;
    w.write_image_data(rgb).map_err(|e| e.to_string())?;
    w.finish().map_err(|e| e.to_string())
}

/// Width of a timeline; its height grows with its rows.
const TIMELINE_WIDTH: u32 = 1100;

/// One bar of a timeline: on row `row`, what ran (its colour and legend entry), from when to
/// when (milliseconds).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bar<'a> {
    pub(crate) row: usize,
    pub(crate) what: &'a str,
    pub(crate) start_ms: f64,
    pub(crate) end_ms: f64,
}

/// Writes a timeline as `path` (SVG) and beside it the same as PNG: the rows named by `rows`
/// top to bottom (lanes: a stream, a thread, a rank's side of the work), a bar per span
/// coloured by what ran, `x_label` across.
///
/// # Errors
/// [`BenchError::File`] when drawing fails; [`BenchError::Io`] when writing does.
pub(crate) fn timeline(
    path: &Path,
    title: &str,
    x_label: &str,
    rows: &[String],
    bars: &[Bar<'_>],
) -> Result<()> {
    let fail = |path: &Path| {
        let path = path.to_path_buf();
        move |e: String| BenchError::File {
            path,
            message: format!("cannot draw the timeline: {e}"),
        }
    };
    if font().is_none() {
        return Err(fail(path)("the embedded font does not load".into()));
    }
    let size = (TIMELINE_WIDTH, 120 + 34 * rows.len().max(1) as u32);
    let mut text = String::new();
    draw_timeline(
        SVGBackend::with_string(&mut text, size).into_drawing_area(),
        title,
        x_label,
        rows,
        bars,
    )
    .map_err(fail(path))?;
    std::fs::write(path, text).map_err(|source| BenchError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let png = path.with_extension("png");
    let mut pixels = vec![0u8; (size.0 * size.1 * 3) as usize];
    draw_timeline(
        Bitmap(BitMapBackend::with_buffer(&mut pixels, size)).into_drawing_area(),
        title,
        x_label,
        rows,
        bars,
    )
    .map_err(fail(&png))?;
    write_png(&png, &pixels, size).map_err(fail(&png))
}

fn draw_timeline<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    row_names: &[String],
    bars: &[Bar<'_>],
) -> std::result::Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let mut names: Vec<&str> = Vec::new();
    for b in bars {
        if !names.contains(&b.what) {
            names.push(b.what);
        }
    }
    let end = bars.iter().fold(0f64, |m, b| m.max(b.end_ms)).max(1e-3);
    let rows = row_names.len() as i32;
    root.fill(&WHITE).map_err(e)?;
    let width = root.dim_in_pixel().0;
    let (plot_area, legend) = root.split_horizontally(width - LEGEND_WIDTH + 60);
    let mut chart = ChartBuilder::on(&plot_area)
        .caption(title, ("sans-serif", 16))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(170)
        .build_cartesian_2d(0f64..end * 1.02, (0..rows).into_segmented())
        .map_err(e)?;
    // The first row on top: segment `rows - 1` holds it.
    let label = |v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(r) if *r >= 0 && *r < rows => {
            row_names[(rows - 1 - r) as usize].clone()
        }
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_label_formatter(&label)
        .y_labels(rows as usize)
        .axis_desc_style(("sans-serif", 15))
        .label_style(("sans-serif", 13))
        .light_line_style(WHITE)
        .draw()
        .map_err(e)?;
    for b in bars.iter().filter(|b| (b.row as i32) < rows) {
        let row = rows - 1 - b.row as i32;
        let color = COLORS[names.iter().position(|&n| n == b.what).unwrap_or(0) % COLORS.len()];
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [
                    (b.start_ms, SegmentValue::Exact(row)),
                    (b.end_ms, SegmentValue::Exact(row + 1)),
                ],
                color.filled(),
            )))
            .map_err(e)?;
    }
    for (i, name) in names.iter().enumerate() {
        let y = 40 + 20 * i as i32;
        legend
            .draw(&Rectangle::new(
                [(4, y - 6), (28, y + 6)],
                COLORS[i % COLORS.len()].filled(),
            ))
            .map_err(e)?;
        legend
            .draw(&Text::new(
                name.to_string(),
                (34, y - 7),
                ("sans-serif", 14).into_font(),
            ))
            .map_err(e)?;
    }
    root.present().map_err(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: PlotSpec = PlotSpec {
        table: "t",
        x: "n",
        x_label: "rows",
        y: &["rate"],
        y_label: "rate",
        series: &["algorithm"],
    };

    #[test]
    fn lines_per_algorithm_over_the_swept_axis() {
        let rows: Vec<Row> = [
            (16u64, "A", 1.0),
            (64, "A", 2.0),
            (16, "B", 3.0),
            (64, "B", 4.0),
        ]
        .iter()
        .map(|&(n, a, r)| {
            Row::new("t")
                .with("n", n)
                .with("algorithm", a)
                .with("rate", r)
        })
        .collect();
        let refs: Vec<&Row> = rows.iter().collect();
        let c = chart(&refs, &SPEC, &[], "t").unwrap();
        assert!(c.log2);
        assert_eq!(c.series.len(), 2);
        assert_eq!(c.series[1].label, "B");
        assert_eq!(c.series[1].points, vec![(4.0, 3.0), (6.0, 4.0)]);
        // One size: nothing to plot.
        assert!(chart(&refs[..1], &SPEC, &[], "t").is_none());
    }

    #[test]
    fn svg_and_png_are_written() {
        let dir = std::env::temp_dir().join(format!("joinkit-bench-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rows: Vec<Row> = (10..14u32)
            .map(|l| {
                Row::new("t")
                    .with("n", 1u64 << l)
                    .with("algorithm", "A")
                    .with("rate", f64::from(l))
            })
            .collect();
        let refs: Vec<&Row> = rows.iter().collect();
        let files = plot(&refs, &SPEC, &[], "test", &dir, "t").unwrap();
        assert_eq!(files.len(), 2);
        let svg = std::fs::read_to_string(&files[0]).unwrap();
        assert!(svg.contains("2^12") && svg.contains("rows"));
        let png = std::fs::read(&files[1]).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
