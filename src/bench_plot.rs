//! `edgetam bench --plot`: an SVG with frame time over the measured frames (one line per
//! configuration) above the median stage breakdown (one stacked bar per configuration).

use std::path::Path;

use anyhow::{anyhow, Result};
use edgetam::tracker::StageTimes;
use plotters::prelude::*;

const STAGE_COLORS: [RGBColor; 6] = [
    RGBColor(120, 120, 120),
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
];

/// What the plot needs of a configuration.
pub struct PlotSeries {
    pub name: String,
    pub frame_ms: Vec<(u64, f64)>,
    /// Median per stage, in [`StageTimes::NAMES`] order.
    pub stage_medians: Vec<f64>,
}

fn plot_err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("cannot draw the plot: {e}")
}

pub fn draw(path: &Path, series: &[PlotSeries]) -> Result<()> {
    let root = SVGBackend::new(path, (960, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let (top, bottom) = root.split_vertically(450);

    // Frame time over frames.
    let first = series
        .iter()
        .flat_map(|s| s.frame_ms.iter().map(|p| p.0))
        .min()
        .unwrap_or(0);
    let last = series
        .iter()
        .flat_map(|s| s.frame_ms.iter().map(|p| p.0))
        .max()
        .unwrap_or(1)
        .max(first + 1);
    let peak = series
        .iter()
        .flat_map(|s| s.frame_ms.iter().map(|p| p.1))
        .fold(1.0f64, f64::max);
    let mut chart = ChartBuilder::on(&top)
        .caption("frame time (end to end)", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(first..last, 0.0..peak * 1.1)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("frame")
        .y_desc("ms")
        .draw()
        .map_err(plot_err)?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                s.frame_ms.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(plot_err)?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;

    // Median stage breakdown, one stacked bar per configuration.
    let total_max = series
        .iter()
        .map(|s| s.stage_medians.iter().sum::<f64>())
        .fold(1.0f64, f64::max);
    let n = series.len().max(1);
    let mut bars = ChartBuilder::on(&bottom)
        .caption("median stage breakdown", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..n as f64, 0.0..total_max * 1.25)
        .map_err(plot_err)?;
    let names: Vec<String> = series.iter().map(|s| s.name.clone()).collect();
    bars.configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let i = (*x - 0.5).round();
            if (x - 0.5 - i).abs() < 1e-6 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("ms")
        .draw()
        .map_err(plot_err)?;
    for (stage, color) in StageTimes::NAMES.iter().zip(STAGE_COLORS) {
        let k = StageTimes::NAMES
            .iter()
            .position(|n| n == stage)
            .unwrap_or(0);
        let rects: Vec<_> = series
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let base: f64 = s.stage_medians[..k].iter().sum();
                let top = base + s.stage_medians.get(k).copied().unwrap_or(0.0);
                Rectangle::new(
                    [(i as f64 + 0.2, base), (i as f64 + 0.8, top)],
                    color.filled(),
                )
            })
            .collect();
        bars.draw_series(rects)
            .map_err(plot_err)?
            .label(stage.replace('_', " "))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    bars.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)?;
    Ok(())
}
