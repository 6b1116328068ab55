//! SVG plots of reports: the JCT CDFs of several policies (the figure Graphene §7 and Carbyne
//! §5 use to compare schedulers), of a study's seeds pooled, the speedup over a baseline against
//! the load of a sweep, one run's utilisation over time, and line charts of any series (a
//! learning curve). Titles name the workload and the
//! cluster, so that a figure explains itself.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::SimError;
use crate::report::SimReport;
use crate::study::{seeds_label, LoadSweep, SeedStudy};

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

/// The file name of a workload path, for titles (`../shared/workloads/tpch-decima.jsonl` →
/// `tpch-decima.jsonl`); the whole path when it has no file name.
pub fn workload_name(path: &Path) -> String {
    path.file_name()
        .unwrap_or(path.as_os_str())
        .to_string_lossy()
        .into_owned()
}

const TITLE_HEIGHT: u32 = 84;

/// Width of the legend column of [`plot_gain_vs_load`].
const LEGEND_WIDTH: u32 = 170;

/// Draws a title and two smaller lines under it at the top of `root`, and returns the area
/// below them for the chart. Three lines rather than one caption: the workload, the cluster and
/// the scenario do not fit on one line of a readable size.
fn titled<'a>(
    root: &DrawingArea<SVGBackend<'a>, Shift>,
    title: &str,
    lines: [&str; 2],
) -> Result<DrawingArea<SVGBackend<'a>, Shift>, DrawingAreaErrorKind<std::io::Error>> {
    let (top, rest) = root.split_vertically(TITLE_HEIGHT);
    let centre = i32::try_from(WIDTH / 2).unwrap_or(0);
    let anchor = Pos::new(HPos::Center, VPos::Top);
    top.draw(&Text::new(
        title.to_string(),
        (centre, 10),
        ("sans-serif", 22)
            .into_font()
            .into_text_style(&top)
            .pos(anchor),
    ))?;
    for (k, line) in lines.iter().enumerate() {
        let y = 40 + 19 * i32::try_from(k).unwrap_or(0);
        top.draw(&Text::new(
            (*line).to_string(),
            (centre, y),
            ("sans-serif", 15)
                .into_font()
                .color(&RGBColor(70, 70, 70))
                .pos(anchor),
        ))?;
    }
    Ok(rest)
}

/// The ticks of a logarithmic axis over `[lo, hi]`: 1, 2 and 5 times the powers of ten in
/// it, or every digit times them when that gives fewer than three ticks (a range within a
/// decade or two). Plotters' own logarithmic ticks are the powers of ten and, when space allows,
/// every digit between them, whose labels run into each other near the top of a decade (and a
/// range with no power of ten in it gets no tick at all).
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite() && lo > 0.0 && hi > lo) {
        return Vec::new();
    }
    let ticks = |digits: &[f64]| -> Vec<f64> {
        let mut out = Vec::new();
        let mut decade = 10_f64.powf(lo.log10().floor());
        while decade <= hi {
            for &d in digits {
                let x = d * decade;
                if x >= lo && x <= hi {
                    out.push(x);
                }
            }
            decade *= 10.0;
        }
        out
    };
    let coarse = ticks(&[1.0, 2.0, 5.0]);
    if coarse.len() >= 3 {
        coarse
    } else {
        ticks(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
    }
}

/// A tick label: `x` with as many decimals as its power of ten needs (`20`, `0.5`).
fn tick_label(x: f64) -> String {
    if !(x.is_finite() && x > 0.0) {
        return String::new();
    }
    let exponent = x.log10().floor();
    let decimals = if exponent < 0.0 {
        (-exponent) as usize
    } else {
        0
    };
    format!("{x:.decimals$}")
}

/// Draws the cumulative distribution of job completion times of each report, one line per
/// policy, on a logarithmic time axis (JCTs of TPC-H jobs span two orders of magnitude), into an
/// SVG file at `path`. The title names `workload` (the file's name, see [`workload_name`]), the
/// cluster and the scenario of the first report.
pub fn plot_jct_cdf(reports: &[SimReport], workload: &str, path: &Path) -> Result<(), SimError> {
    let series: Vec<(String, Vec<f64>)> = reports
        .iter()
        .map(|r| (r.policy.clone(), r.jobs.iter().map(|j| j.jct_s).collect()))
        .collect();
    let (cluster, scenario) = reports.first().map_or_else(
        || (String::new(), String::new()),
        |r| {
            (
                r.scenario.cluster(),
                format!("{}; seed {}", r.scenario.workload_line(), r.scenario.seed),
            )
        },
    );
    draw_cdf(&series, workload, [&cluster, &scenario], path)
}

/// [`plot_jct_cdf`] of a study over several seeds: one line per policy, of the JCTs of all its
/// runs (every seed's jobs pooled). Needs the study's [`SeedStudy::reports`], which a study read
/// back from JSON does not have.
pub fn plot_seed_jct_cdf(study: &SeedStudy, workload: &str, path: &Path) -> Result<(), SimError> {
    if study.reports.is_empty() {
        return Err(plot_error(
            path,
            "the study holds no runs (studies read back from JSON keep only the aggregate)",
        ));
    }
    let series: Vec<(String, Vec<f64>)> = study
        .policies
        .iter()
        .enumerate()
        .map(|(p, policy)| {
            let jcts = study
                .reports
                .iter()
                .filter_map(|runs| runs.get(p))
                .flat_map(|r| r.jobs.iter().map(|j| j.jct_s))
                .collect();
            (policy.policy.clone(), jcts)
        })
        .collect();
    let s = &study.scenario;
    let scenario = format!(
        "{}; seeds {}, the JCTs of all seeds pooled",
        s.workload_line(),
        seeds_label(&study.seeds)
    );
    draw_cdf(&series, workload, [&s.cluster(), &scenario], path)
}

fn draw_cdf(
    series: &[(String, Vec<f64>)],
    workload: &str,
    lines: [&str; 2],
    path: &Path,
) -> Result<(), SimError> {
    let err = |e: &dyn std::fmt::Display| plot_error(path, e);
    let jcts: Vec<Vec<f64>> = series
        .iter()
        .map(|(_, jcts)| {
            let mut v = jcts.clone();
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
    let area = titled(
        &root,
        &format!("Job completion time CDF: {workload}"),
        lines,
    )
    .map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&area)
        .margin(16)
        .margin_top(4)
        .x_label_area_size(52)
        .y_label_area_size(64)
        .build_cartesian_2d(
            (lo..hi).log_scale().with_key_points(log_ticks(lo, hi)),
            0.0..1.0,
        )
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("job completion time (s, log scale)")
        .y_desc("fraction of jobs")
        .x_label_formatter(&|x| tick_label(*x))
        .y_label_formatter(&|y| format!("{y:.1}"))
        .light_line_style(TRANSPARENT)
        .draw()
        .map_err(|e| err(&e))?;
    for (i, ((name, _), sorted)) in series.iter().zip(&jcts).enumerate() {
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
        labelled_line(&mut chart, color, name, points, path)?;
    }
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight, path)?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// One policy's gains in a sweep: per point, (load, mean, min, max).
type GainLine = (String, Vec<(f64, f64, f64, f64)>);

/// Draws, for each policy of a load sweep but `baseline`, its average-JCT speedup over
/// `baseline` (per seed, [`SeedStudy::gain_over`]: the mean as a point, min–max over the seeds
/// as an error bar) against the load: `baseline`'s mean CPU utilisation at each machine count,
/// each load labelled with its machine count at the top of the chart. A dashed line marks 1 (as
/// fast as the baseline). The policies' points at one load are spread slightly sideways so that
/// their bars do not hide one another. The title names `workload` and the clusters.
pub fn plot_gain_vs_load(
    sweep: &LoadSweep,
    baseline: &str,
    workload: &str,
    path: &Path,
) -> Result<(), SimError> {
    let err = |e: &dyn std::fmt::Display| plot_error(path, e);
    if sweep.points.is_empty() {
        return Err(plot_error(path, "the sweep has no point"));
    }
    let mut loads = Vec::with_capacity(sweep.points.len());
    for point in &sweep.points {
        let Some(base) = point.policy(baseline) else {
            return Err(SimError::InvalidConfig {
                reason: format!(
                    "baseline `{baseline}` was not run at {} machines of the sweep",
                    point.scenario.machines
                ),
            });
        };
        loads.push((base.cpu_utilization.mean * 100.0, point.scenario.machines));
    }
    let lines: Vec<GainLine> = sweep.points[0]
        .policies
        .iter()
        .filter(|p| p.policy != baseline)
        .filter_map(|p| {
            let points = sweep
                .points
                .iter()
                .zip(&loads)
                .map(|(point, &(x, _))| {
                    point
                        .gain_over(&p.policy, baseline)
                        .map(|g| (x, g.mean, g.min, g.max))
                })
                .collect::<Option<Vec<_>>>()?;
            Some((p.policy.clone(), points))
        })
        .collect();

    let (x_lo, x_hi) = loads
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &(x, _)| {
            (lo.min(x), hi.max(x))
        });
    let x_pad = ((x_hi - x_lo) * 0.08).max(3.0);
    let (x_lo, x_hi) = (x_lo - x_pad, x_hi + x_pad);
    let (y_lo, y_hi) = lines
        .iter()
        .flat_map(|(_, points)| points.iter())
        .fold((1.0_f64, 1.0_f64), |(lo, hi), &(_, _, min, max)| {
            (lo.min(min), hi.max(max))
        });
    let y_pad = ((y_hi - y_lo) * 0.08).max(0.05);
    // Room above the data for the machine-count labels.
    let (y_lo, y_hi) = (y_lo - y_pad, y_hi + 3.0 * y_pad);
    let spread = (x_hi - x_lo) * 0.006;

    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let counts: Vec<String> = loads.iter().map(|(_, m)| m.to_string()).collect();
    let first = &sweep.points[0].scenario;
    let cluster = format!("{} machines × {}", counts.join(", "), sweep.machine);
    let scenario = format!(
        "{}; seeds {}: mean, bars min–max",
        first.workload_line(),
        seeds_label(&sweep.seeds)
    );
    let area = titled(
        &root,
        &format!("Average-JCT speedup over {baseline} against load: {workload}"),
        [&cluster, &scenario],
    )
    .map_err(|e| err(&e))?;
    // The legend goes in a column of its own: inside the chart it would hide points.
    let (area, legend) = area.split_horizontally(WIDTH - LEGEND_WIDTH);
    let mut chart = ChartBuilder::on(&area)
        .margin(16)
        .margin_top(4)
        .margin_right(4)
        .x_label_area_size(52)
        .y_label_area_size(64)
        .build_cartesian_2d(x_lo..x_hi, y_lo..y_hi)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(format!(
            "load: {baseline}'s mean CPU utilisation (%), machine count above"
        ))
        .y_desc(format!("{baseline}'s avg JCT / the policy's (×)"))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.2}"))
        .light_line_style(TRANSPARENT)
        .draw()
        .map_err(|e| err(&e))?;
    chart
        .draw_series(DashedLineSeries::new(
            vec![(x_lo, 1.0), (x_hi, 1.0)],
            8,
            5,
            BLACK.mix(0.6).stroke_width(1),
        ))
        .map_err(|e| err(&e))?;
    // Machine counts above their loads, on two rows where neighbours are close.
    let mut order: Vec<usize> = (0..loads.len()).collect();
    order.sort_by(|&a, &b| loads[a].0.total_cmp(&loads[b].0));
    let mut row = 0;
    let mut previous: Option<f64> = None;
    for &i in &order {
        let (x, machines) = loads[i];
        row = match previous {
            Some(p) if x - p < (x_hi - x_lo) * 0.12 => 1 - row,
            _ => 0,
        };
        previous = Some(x);
        let y = y_hi - y_pad * (0.4 + 1.1 * f64::from(row));
        let plural = if machines == 1 { "" } else { "s" };
        chart
            .draw_series(std::iter::once(Text::new(
                format!("{machines} machine{plural}"),
                (x, y),
                ("sans-serif", 14)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Center, VPos::Center)),
            )))
            .map_err(|e| err(&e))?;
        chart
            .draw_series(DashedLineSeries::new(
                vec![(x, y_lo), (x, y - y_pad * 0.4)],
                3,
                4,
                BLACK.mix(0.25).stroke_width(1),
            ))
            .map_err(|e| err(&e))?;
    }
    let n = lines.len();
    for (i, (name, points)) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let dx = (i as f64 - (n as f64 - 1.0) / 2.0) * spread;
        let mut points: Vec<(f64, f64, f64, f64)> = points
            .iter()
            .map(|&(x, m, lo, hi)| (x + dx, m, lo, hi))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|&(x, m, _, _)| (x, m)),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?;
        let y = 24 + 24 * i32::try_from(i).unwrap_or(0);
        legend
            .draw(&PathElement::new(
                vec![(8, y), (36, y)],
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?;
        legend
            .draw(&Circle::new((22, y), 4, color.filled()))
            .map_err(|e| err(&e))?;
        legend_label(&legend, name.clone(), y, path)?;
        for &(x, mean, lo, hi) in &points {
            let style = color.stroke_width(1);
            let area = chart.plotting_area();
            area.draw(&PathElement::new(vec![(x, lo), (x, hi)], style))
                .map_err(|e| err(&e))?;
            for y in [lo, hi] {
                area.draw(
                    &(EmptyElement::at((x, y)) + PathElement::new(vec![(-4, 0), (4, 0)], style)),
                )
                .map_err(|e| err(&e))?;
            }
            area.draw(&Circle::new((x, mean), 4, color.filled()))
                .map_err(|e| err(&e))?;
        }
    }
    let y = 24 + 24 * i32::try_from(n).unwrap_or(0);
    legend
        .draw(&PathElement::new(
            vec![(8, y), (14, y)],
            BLACK.mix(0.6).stroke_width(1),
        ))
        .map_err(|e| err(&e))?;
    legend
        .draw(&PathElement::new(
            vec![(22, y), (28, y)],
            BLACK.mix(0.6).stroke_width(1),
        ))
        .map_err(|e| err(&e))?;
    legend_label(&legend, format!("{baseline} (= 1)"), y, path)?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Draws one report's utilisation of each resource over time (its
/// [`crate::metrics::UtilizationTimeline`]) into an SVG file at `path`. The title names the
/// policy and `workload` (the file's name, see [`workload_name`]), the cluster and the scenario.
pub fn plot_utilization(report: &SimReport, workload: &str, path: &Path) -> Result<(), SimError> {
    let err = |e: &dyn std::fmt::Display| plot_error(path, e);
    let timeline = &report.utilization_timeline;
    let points = timeline.series.values().map(Vec::len).max().unwrap_or(0);
    let start = timeline.start_s;
    let end = start + (points.max(1) as f64) * timeline.bin_s.max(f64::MIN_POSITIVE);

    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let scenario = format!(
        "{}; seed {}",
        report.scenario.workload_line(),
        report.scenario.seed
    );
    let area = titled(
        &root,
        &format!("Cluster utilisation under {}: {workload}", report.policy),
        [&report.scenario.cluster(), &scenario],
    )
    .map_err(|e| err(&e))?;
    // The same label areas as the other plots: the y axis's description clears its tick
    // labels.
    let mut chart = ChartBuilder::on(&area)
        .margin(16)
        .margin_top(4)
        .x_label_area_size(52)
        .y_label_area_size(64)
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
        labelled_line(&mut chart, color, name, line, path)?;
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight, path)?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// A line chart of named series of `(x, y)` points: a title and two lines under it, the axes'
/// descriptions, one colour per series with a legend (e.g. a learning curve).
pub fn plot_lines(
    series: &[(String, Vec<(f64, f64)>)],
    title: &str,
    lines: [&str; 2],
    axes: (&str, &str),
    path: &Path,
) -> Result<(), SimError> {
    let err = |e: &dyn std::fmt::Display| plot_error(path, e);
    let points = || series.iter().flat_map(|(_, p)| p.iter());
    let bounds = |f: fn(&(f64, f64)) -> f64| {
        points()
            .map(f)
            .filter(|v| v.is_finite())
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            })
    };
    let (x_lo, x_hi) = bounds(|p| p.0);
    let (y_lo, y_hi) = bounds(|p| p.1);
    if !(x_lo.is_finite() && y_lo.is_finite()) {
        return Err(err(&"no finite point to plot"));
    }
    let pad = ((y_hi - y_lo) * 0.05).max(1e-9);
    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let area = titled(&root, title, lines).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&area)
        .margin(16)
        .margin_top(4)
        .x_label_area_size(52)
        .y_label_area_size(64)
        .build_cartesian_2d(x_lo..x_hi.max(x_lo + 1.0), (y_lo - pad)..(y_hi + pad))
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(axes.0)
        .y_desc(axes.1)
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (name, line)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        labelled_line(&mut chart, color, name, line.iter().copied(), path)?;
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight, path)?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Draws `points` as a line of `color`, named `name` in the legend.
fn labelled_line<X: Ranged<ValueType = f64>, Y: Ranged<ValueType = f64>>(
    chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<X, Y>>,
    color: RGBColor,
    name: &str,
    points: impl IntoIterator<Item = (f64, f64)>,
    path: &Path,
) -> Result<(), SimError> {
    chart
        .draw_series(LineSeries::new(points, color.stroke_width(2)))
        .map_err(|e| plot_error(path, e))?
        .label(name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    Ok(())
}

/// The chart's legend at `position`, on a translucent white box.
fn draw_legend<'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    position: SeriesLabelPosition,
    path: &Path,
) -> Result<(), SimError> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| plot_error(path, e))
}

/// A legend entry's label, left-aligned beside its marker at height `y`.
fn legend_label<DB: DrawingBackend>(
    legend: &DrawingArea<DB, Shift>,
    label: String,
    y: i32,
    path: &Path,
) -> Result<(), SimError> {
    legend
        .draw(&Text::new(
            label,
            (44, y),
            ("sans-serif", 14)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        ))
        .map_err(|e| plot_error(path, &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ticks_are_round_and_never_crowded() {
        assert_eq!(
            log_ticks(4.0, 220.0),
            vec![5.0, 10.0, 20.0, 50.0, 100.0, 200.0]
        );
        // Within a decade: every digit, and still no power of ten needed.
        assert_eq!(log_ticks(2.5, 9.5), vec![3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
        let small = log_ticks(0.04, 1.5);
        assert_eq!(small, vec![0.05, 0.1, 0.2, 0.5, 1.0]);
        assert!(log_ticks(0.0, 1.0).is_empty());
        assert_eq!(tick_label(200.0), "200");
        assert_eq!(tick_label(0.05), "0.05");
        assert_eq!(tick_label(3.0), "3");
    }
}
