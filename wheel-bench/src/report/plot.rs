//! The SVG plots: lateness as HdrHistogram draws a percentile spectrum, and schedule
//! throughput as bars.

use std::path::Path;

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::report::hgrm::SpectrumPoint;

const SIZE: (u32, u32) = (1100, 650);
const FONT: &str = "sans-serif";

/// One line of the lateness plot.
pub struct Line<'a> {
    pub label: String,
    pub points: &'a [SpectrumPoint],
}

/// x = 1/(1-q): percentile q on a log "nines" axis.
fn nines(quantile: f64) -> f64 {
    1.0 / (1.0 - quantile)
}

/// The axis label at x = 1/(1-q): 1 → "0%", 10 → "90%", 1000 → "99.9%".
pub fn percentile_label(x: f64) -> String {
    if x < 1.5 {
        return "0%".into();
    }
    let digits = (x.log10().round() as usize).saturating_sub(2);
    format!("{:.digits$}%", 100.0 - 100.0 / x)
}

/// Lowest lateness drawn: the log axis cannot reach zero.
const FLOOR_MS: f64 = 0.001;

/// Draws the lateness spectrum of each line into `path`. The y axis is logarithmic (in
/// milliseconds) so systems that differ by orders of magnitude stay readable on one plot.
pub fn lateness(path: &Path, title: &str, lines: &[Line<'_>]) -> Result<(), String> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let all = || lines.iter().flat_map(|l| l.points.iter());
    let widest = all().map(|p| nines(p.quantile)).fold(100.0f64, f64::max);
    // Whole decades only, and no further than the points reach.
    let decades = widest.log10().round().max(2.0) as i32;
    let max_x = 10f64.powi(decades);
    let ms = |p: &SpectrumPoint| (p.value_ns as f64 / 1e6).max(FLOOR_MS);
    let top = all().map(ms).fold(FLOOR_MS * 10.0, f64::max);
    let bottom = all().map(ms).fold(top, f64::min);
    let y_range = 10f64.powi(bottom.log10().floor() as i32)..10f64.powi(top.log10().ceil() as i32);
    let key_points: Vec<f64> = (0..=decades).map(|d| 10f64.powi(d)).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 24))
        .margin(20)
        .margin_right(50)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(
            (1f64..max_x).log_scale().with_key_points(key_points),
            y_range.log_scale(),
        )
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("lateness (ms): callback start − requested deadline")
        .x_label_formatter(&|x| percentile_label(*x))
        .y_label_formatter(&|y| format!("{y}"))
        .label_style((FONT, 16))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, line) in lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points = line
            .points
            .iter()
            .filter(|p| nines(p.quantile) <= max_x)
            .map(|p| (nines(p.quantile), ms(p)));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(line.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font((FONT, 16))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// Draws one bar per `(label, timers scheduled per second)` into `path`.
pub fn throughput(path: &Path, title: &str, bars: &[(String, f64)]) -> Result<(), String> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let max_y = bars.iter().map(|(_, v)| v / 1e6).fold(0.1f64, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 24))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(
            (0..bars.len().saturating_sub(1)).into_segmented(),
            0f64..max_y,
        )
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(bars.len().max(1))
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => bars
                .get(*i)
                .map_or(String::new(), |(label, _)| label.clone()),
            _ => String::new(),
        })
        .y_desc("timers scheduled per second (millions)")
        .label_style((FONT, 16))
        .draw()
        .map_err(|e| e.to_string())?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
            let mut bar = Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0.0),
                    (SegmentValue::Exact(i + 1), v / 1e6),
                ],
                Palette99::pick(i).filled(),
            );
            bar.set_margin(0, 0, 25, 25);
            bar
        }))
        .map_err(|e| e.to_string())?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
            let style =
                TextStyle::from((FONT, 16).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
            Text::new(
                format!("{:.2} M/s", v / 1e6),
                (SegmentValue::CenterOf(i), v / 1e6 + max_y * 0.025),
                style,
            )
        }))
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nines_are_labelled_as_percentiles() {
        assert_eq!(percentile_label(1.0), "0%");
        assert_eq!(percentile_label(10.0), "90%");
        assert_eq!(percentile_label(100.0), "99%");
        assert_eq!(percentile_label(1000.0), "99.9%");
        assert_eq!(percentile_label(100_000.0), "99.999%");
    }

    #[test]
    fn both_plots_render_to_svg() {
        let dir = std::env::temp_dir().join(format!("wheel-bench-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut fast = crate::harness::histogram::new_histogram();
        let mut slow = crate::harness::histogram::new_histogram();
        for i in 0..100_000u64 {
            fast.record(500_000 + i * 10).unwrap();
            slow.record(1_000 + i * i / 20).unwrap();
        }
        let (a, b) = (
            crate::report::hgrm::spectrum(&fast),
            crate::report::hgrm::spectrum(&slow),
        );
        let lines = [
            Line {
                label: "fast".into(),
                points: &a,
            },
            Line {
                label: "slow".into(),
                points: &b,
            },
        ];
        lateness(&dir.join("lateness.svg"), "lateness", &lines).unwrap();
        throughput(
            &dir.join("throughput.svg"),
            "throughput",
            &[("a".into(), 4e6), ("b".into(), 1e7)],
        )
        .unwrap();
        let svg = std::fs::read_to_string(dir.join("lateness.svg")).unwrap();
        assert!(
            svg.contains("99.99%") && svg.contains("fast"),
            "labels and legend drawn"
        );
        assert!(!svg.contains("99.9999%"), "no axis beyond the samples");
        let bars = std::fs::read_to_string(dir.join("throughput.svg")).unwrap();
        assert!(bars.contains("10.00 M/s"));
    }
}
