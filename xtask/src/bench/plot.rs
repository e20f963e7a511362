//! PNG line charts for BENCHMARKS.md (plotters' bitmap backend, DejaVu Sans embedded, so no
//! system font is needed).

use std::path::Path;
use std::sync::OnceLock;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

pub const WIDTH: u32 = 900;
pub const HEIGHT: u32 = 500;

/// Line colours: ours in blues, upstream in oranges, by variant.
fn colour(label: &str, index: usize) -> RGBColor {
    const OURS: [RGBColor; 3] = [
        RGBColor(31, 119, 180),
        RGBColor(23, 190, 207),
        RGBColor(44, 160, 44),
    ];
    const UPSTREAM: [RGBColor; 3] = [
        RGBColor(255, 127, 14),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
    ];
    if label.starts_with("ours") {
        OURS[index % OURS.len()]
    } else {
        UPSTREAM[index % UPSTREAM.len()]
    }
}

/// Axis ranges covering every point, starting at 0, with a little headroom.
pub fn bounds(lines: &[Line]) -> (f64, f64) {
    let max = |f: fn(&(f64, f64)) -> f64| {
        lines
            .iter()
            .flat_map(|l| l.points.iter().map(f))
            .filter(|v| v.is_finite())
            .fold(0.0_f64, f64::max)
    };
    let x = max(|p| p.0);
    let y = max(|p| p.1);
    let pad = |v: f64| if v > 0.0 { v * 1.05 } else { 1.0 };
    (pad(x), pad(y))
}

fn register_font() -> Result<()> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(anyhow!("the embedded DejaVu Sans font did not load"))
    }
}

/// Draws `lines` into a PNG at `path`.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    lines: &[Line],
) -> Result<()> {
    register_font()?;
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (x_max, y_max) = bounds(lines);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(|e| err(&e))?;
    let mut counts = std::collections::HashMap::new();
    for line in lines {
        let side = if line.label.starts_with("ours") { 0 } else { 1 };
        let n = counts.entry(side).or_insert(0usize);
        let c = colour(&line.label, *n);
        *n += 1;
        chart
            .draw_series(LineSeries::new(
                line.points.iter().copied(),
                c.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(line.label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3)));
    }
    if !lines.is_empty() {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_cover_points_with_headroom() {
        let lines = vec![
            Line {
                label: "ours".into(),
                points: vec![(0.0, 1.0), (10.0, 4.0)],
            },
            Line {
                label: "upstream".into(),
                points: vec![(20.0, 2.0), (f64::NAN, 100.0)],
            },
        ];
        let (x, y) = bounds(&lines);
        assert!((x - 21.0).abs() < 1e-9, "{x}");
        assert!((y - 105.0).abs() < 1e-9, "{y}");
        assert_eq!(bounds(&[]), (1.0, 1.0));
    }

    #[test]
    fn colours_tell_the_sides_apart() {
        assert_ne!(colour("ours", 0), colour("upstream", 0));
        assert_ne!(colour("ours a", 0), colour("ours b", 1));
    }

    #[test]
    fn writes_a_png() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chart.png");
        let lines = vec![
            Line {
                label: "ours qps 5/10".into(),
                points: (0..50).map(|i| (f64::from(i), f64::from(i * i))).collect(),
            },
            Line {
                label: "upstream qps 5/10".into(),
                points: (0..50).map(|i| (f64::from(i), f64::from(i * 30))).collect(),
            },
        ];
        line_chart(&path, "Volumes bound", "seconds", "volumes", &lines).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        // Width and height from the IHDR chunk.
        let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
        let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
        assert_eq!((w, h), (WIDTH, HEIGHT));
        line_chart(&dir.path().join("empty.png"), "nothing", "x", "y", &[]).unwrap();
    }
}
