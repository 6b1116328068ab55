//! What the benches read about the processes they run, from `/proc` (Linux) and from the
//! masters' Prometheus text: CPU time per process and per group of this process's threads,
//! the machine's busy time and load, resident memory, the heap in use, and metric samples.
//! Elsewhere than Linux every reading is `None` or empty, and the benches print no figure for it.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

/// Clock ticks per second of `/proc`'s CPU times.
fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions and touches no memory of ours.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// User plus system CPU seconds in a `/proc/.../stat` line (fields 14 and 15; the command
/// name in parentheses may hold spaces, so fields are counted after its closing one).
fn stat_cpu_seconds(stat: &str) -> Option<f64> {
    let (_, after) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / ticks_per_second())
}

/// CPU seconds process `pid` has used so far (all its threads, user and system).
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    stat_cpu_seconds(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// CPU seconds this process's threads have used so far, summed by thread name (`comm`), with
/// every name cut at its first `-` digit run removed (`bench-agents-3` → `bench-agents`), so
/// that a runtime's workers add up under their runtime's name.
pub fn own_threads_cpu_seconds() -> BTreeMap<String, f64> {
    let mut by_name = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return by_name;
    };
    for task in tasks.flatten() {
        let dir = task.path();
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(dir.join("comm")),
            std::fs::read_to_string(dir.join("stat")),
        ) else {
            continue;
        };
        if let Some(seconds) = stat_cpu_seconds(&stat) {
            *by_name.entry(thread_group(comm.trim())).or_insert(0.0) += seconds;
        }
    }
    by_name
}

/// The group a thread's name belongs to: the name without a trailing `-<digits>`.
fn thread_group(name: &str) -> String {
    match name.rsplit_once('-') {
        Some((stem, digits))
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) =>
        {
            stem.to_string()
        }
        _ => name.to_string(),
    }
}

/// The machine's CPU time so far, in seconds: (busy, total) over every core, from
/// `/proc/stat` (busy is everything but idle and I/O wait).
pub fn machine_cpu_seconds() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let values: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user already).
    let total: f64 = values.iter().take(8).sum();
    let idle = values.get(3).copied().unwrap_or(0.0) + values.get(4).copied().unwrap_or(0.0);
    let ticks = ticks_per_second();
    Some(((total - idle) / ticks, total / ticks))
}

/// The machine's load averages over 1, 5 and 15 minutes (`uptime`'s figures).
pub fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut fields = text.split_whitespace().map(str::parse::<f64>);
    Some([
        fields.next()?.ok()?,
        fields.next()?.ok()?,
        fields.next()?.ok()?,
    ])
}

/// The resident set size of process `pid`, in bytes.
pub fn resident_bytes(pid: u32) -> Option<u64> {
    status_kib(&format!("/proc/{pid}/status"), "VmRSS:").map(|kib| kib * 1024)
}

/// A `kB` field of a `/proc/.../status` file.
fn status_kib(path: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(Path::new(path)).ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].split_whitespace().next()?.parse().ok()
}

/// Bytes this process holds allocated with malloc (glibc's `mallinfo2`: in-use chunks of every
/// arena plus mmapped ones); `None` where that is not available. Unlike the resident size it
/// does not count memory freed but kept by the allocator, so a difference of two readings is
/// what the code in between keeps.
pub fn heap_in_use() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads the allocator's own counters.
        let info = unsafe { libc::mallinfo2() };
        Some((info.uordblks + info.hblkhd) as u64)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

/// CPU use over a span, in cores (CPU seconds per second of wall time).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CpuShare {
    /// Who (a master, a group of the bench's threads, or `machine`).
    pub who: String,
    /// Cores used on average.
    pub cores: f64,
}

/// Readings of CPU counters at one moment, to subtract from a later one.
#[derive(Clone, Debug, Default)]
pub struct CpuReading {
    processes: BTreeMap<String, f64>,
    threads: BTreeMap<String, f64>,
    machine: Option<(f64, f64)>,
    at: Option<std::time::Instant>,
}

impl CpuReading {
    /// Reads the CPU seconds of `processes` (a name for each pid), this process's thread
    /// groups and the machine's.
    pub fn take(processes: &[(String, u32)]) -> CpuReading {
        CpuReading {
            processes: processes
                .iter()
                .filter_map(|(name, pid)| Some((name.clone(), process_cpu_seconds(*pid)?)))
                .collect(),
            threads: own_threads_cpu_seconds(),
            machine: machine_cpu_seconds(),
            at: Some(std::time::Instant::now()),
        }
    }

    /// The cores each used between `earlier` and `self`: every process, the bench's thread
    /// groups that used at least 1% of a core (`bench/<group>`), then the whole machine
    /// (`machine`, busy cores, whoever used them, other users of the machine included) and
    /// its core count (`machine cores`).
    pub fn since(&self, earlier: &CpuReading) -> Vec<CpuShare> {
        let (Some(now), Some(then)) = (self.at, earlier.at) else {
            return Vec::new();
        };
        let wall = now.duration_since(then).as_secs_f64().max(1e-9);
        let mut shares = Vec::new();
        for (name, seconds) in &self.processes {
            if let Some(before) = earlier.processes.get(name) {
                shares.push(CpuShare {
                    who: name.clone(),
                    cores: (seconds - before) / wall,
                });
            }
        }
        for (group, seconds) in &self.threads {
            let cores = (seconds - earlier.threads.get(group).copied().unwrap_or(0.0)) / wall;
            if cores >= 0.01 {
                shares.push(CpuShare {
                    who: format!("bench/{group}"),
                    cores,
                });
            }
        }
        if let (Some((busy, total)), Some((busy0, total0))) = (self.machine, earlier.machine) {
            shares.push(CpuShare {
                who: "machine".to_string(),
                cores: (busy - busy0) / wall,
            });
            shares.push(CpuShare {
                who: "machine cores".to_string(),
                cores: (total - total0) / wall,
            });
        }
        shares
    }
}

/// A sample of a Prometheus text exposition: the sum of every series named `name` whose
/// labels contain `label` (e.g. `quantile="0.99"`; empty: every series). `None` when no
/// series matched.
pub fn metric(text: &str, name: &str, label: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (labels, value) = match rest.strip_prefix('{') {
            Some(labelled) => match labelled.split_once('}') {
                Some((labels, value)) => (labels, value),
                None => continue,
            },
            // Another metric whose name starts with this one (`x_count` for `x`).
            None if !rest.starts_with(' ') => continue,
            None => ("", rest),
        };
        if !labels.contains(label) {
            continue;
        }
        let Some(value) = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        else {
            continue;
        };
        *found.get_or_insert(0.0) += value;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_read_after_the_command_name() {
        let stat = "42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 150 0 0 20 0 3 0 7 0 0";
        let seconds = stat_cpu_seconds(stat).expect("parsed");
        assert!((seconds - 400.0 / ticks_per_second()).abs() < 1e-9);
        assert_eq!(stat_cpu_seconds("no parenthesis"), None);
    }

    #[test]
    fn runtime_workers_group_under_their_runtime() {
        assert_eq!(thread_group("bench-agents-12"), "bench-agents");
        assert_eq!(thread_group("bench-agents"), "bench-agents");
        assert_eq!(thread_group("tokio-runtime-w"), "tokio-runtime-w");
        assert_eq!(thread_group("main"), "main");
    }

    #[test]
    fn metrics_are_summed_over_matching_series() {
        let text = "# TYPE x counter\n\
                    x_total{shard=\"1\"} 3\n\
                    x_total{shard=\"2\"} 4\n\
                    x_totals 100\n\
                    y_seconds{quantile=\"0.5\"} 0.002\n\
                    y_seconds{quantile=\"0.99\"} 0.01\n\
                    y_seconds_sum 1.5\n\
                    y_seconds_count 300\n";
        assert_eq!(metric(text, "x_total", ""), Some(7.0));
        assert_eq!(metric(text, "x_total", "shard=\"2\""), Some(4.0));
        assert_eq!(metric(text, "y_seconds", "quantile=\"0.99\""), Some(0.01));
        assert_eq!(metric(text, "y_seconds_sum", ""), Some(1.5));
        assert_eq!(metric(text, "y_seconds_count", ""), Some(300.0));
        assert_eq!(metric(text, "z", ""), None);
    }

    #[test]
    fn this_process_is_measured_where_proc_exists() {
        if !Path::new("/proc/self/stat").exists() {
            return;
        }
        let pid = std::process::id();
        assert!(process_cpu_seconds(pid).is_some());
        assert!(resident_bytes(pid).is_some_and(|rss| rss > 0));
        assert!(!own_threads_cpu_seconds().is_empty());
        let (busy, total) = machine_cpu_seconds().expect("/proc/stat");
        assert!(busy <= total && total > 0.0);
    }
}
