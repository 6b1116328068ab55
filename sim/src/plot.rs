//! SVG plots of reports: the JCT CDFs of several policies (the figure Graphene §7 and Carbyne
//! §5 use to compare schedulers) and one run's utilisation over time.

use std::path::Path;

use plotters::prelude::*;

use crate::error::SimError;
use crate::report::SimReport;

const WIDTH: u32 = 960;
const HEIGHT: u32 = 600;

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

fn plot_error(path: &Path, e: impl std::fmt::Display) -> SimError {
    SimError::Plot {
        file: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// Draws the cumulative distribution of job completion times of each report, one line per
/// policy, on a logarithmic time axis (JCTs of TPC-H jobs span two orders of magnitude), into an
/// SVG file at `path`.
pub fn plot_jct_cdf(reports: &[SimReport], path: &Path) -> Result<(), SimError> {
    let err = |e: &dyn std::fmt::Display| plot_error(path, e);
    let jcts: Vec<Vec<f64>> = reports
        .iter()
        .map(|r| {
            let mut v: Vec<f64> = r.jobs.iter().map(|j| j.jct_s).collect();
            v.sort_by(f64::total_cmp);
            v
        })
        .collect();
    let positive = jcts.iter().flatten().copied().filter(|x| *x > 0.0);
    let lo = positive.clone().fold(f64::INFINITY, f64::min);
    let hi = positive.fold(0.0, f64::max);
    let (lo, hi) = if lo.is_finite() && hi > lo {
        (lo * 0.9, hi * 1.1)
    } else if lo.is_finite() {
        (lo * 0.5, lo * 2.0)
    } else {
        (0.1, 1.0)
    };

    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Job completion time CDF", ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(56)
        .build_cartesian_2d((lo..hi).log_scale(), 0.0..1.0)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("job completion time (s, log scale)")
        .y_desc("fraction of jobs")
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (report, sorted)) in reports.iter().zip(&jcts).enumerate() {
        let color = COLORS[i % COLORS.len()];
        let n = sorted.len().max(1) as f64;
        // A step function: the fraction jumps at each JCT.
        let mut points = Vec::with_capacity(2 * sorted.len() + 1);
        points.push((lo, 0.0));
        for (k, &x) in sorted.iter().enumerate() {
            let x = x.max(lo);
            points.push((x, k as f64 / n));
            points.push((x, (k + 1) as f64 / n));
        }
        points.push((hi, if sorted.is_empty() { 0.0 } else { 1.0 }));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(report.policy.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Draws one report's utilisation of each resource over time (its
/// [`crate::metrics::UtilizationTimeline`]) into an SVG file at `path`.
pub fn plot_utilization(report: &SimReport, path: &Path) -> Result<(), SimError> {
    let err = |e: &dyn std::fmt::Display| plot_error(path, e);
    let timeline = &report.utilization_timeline;
    let points = timeline.series.values().map(Vec::len).max().unwrap_or(0);
    let start = timeline.start_s;
    let end = start + (points.max(1) as f64) * timeline.bin_s.max(f64::MIN_POSITIVE);

    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Cluster utilisation: {}", report.policy),
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(56)
        .build_cartesian_2d(start..end, 0.0..1.05)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("fraction of cluster capacity in use")
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (name, series)) in timeline.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        // Each value is the average over its bin: draw it as a flat step across the bin.
        let mut line = Vec::with_capacity(2 * series.len());
        for (k, &u) in series.iter().enumerate() {
            let t0 = start + k as f64 * timeline.bin_s;
            line.push((t0, u));
            line.push((t0 + timeline.bin_s, u));
        }
        chart
            .draw_series(LineSeries::new(line, color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
