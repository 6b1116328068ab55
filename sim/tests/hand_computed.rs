//! Small workloads whose outcome can be worked out by hand.

use fullerene_sdk::testkit::{job, res, stage};
use fullerene_sim::{run, simulate, ArrivalSpec, PolicyKind, SimConfig, SimError};

fn one_machine(spec: &str) -> SimConfig {
    SimConfig {
        machines: 1,
        machine: res(spec),
        arrivals: ArrivalSpec::Trace,
        record_trace: true,
        ..SimConfig::default()
    }
}

/// The chain a → b → c, arriving at `arrival_s`: a is two 3 s tasks of 2 cores, b one 5 s
/// task of 4 cores, c three 1 s tasks of 2 cores.
fn chain_job(arrival_s: f64) -> fullerene_sdk::Job {
    job(
        "chain",
        "default",
        Some(arrival_s),
        vec![
            stage(0, &[], &[3.0, 3.0], res("cpus=2")),
            stage(1, &[0], &[5.0], res("cpus=4")),
            stage(2, &[1], &[1.0, 1.0, 1.0], res("cpus=2")),
        ],
    )
}

/// One chain job on one 4-core machine. Stage a: two 3 s tasks of 2 cores run side by side,
/// [0, 3]; b: one 5 s task of 4 cores, [3, 8]; c: three 1 s tasks of 2 cores, two in [8, 9] and
/// the last in [9, 10]. Every policy must find this schedule: there is no choice to make that
/// could finish earlier, and every policy is work-conserving enough not to finish later.
#[test]
fn a_chain_job_on_one_machine_takes_its_critical_path_under_every_policy() {
    let chain = chain_job(2.0);
    let config = one_machine("cpus=4,mem_mib=1024");
    for kind in PolicyKind::ALL {
        let outcome = simulate(std::slice::from_ref(&chain), &config, kind, None, None)
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
        let report = &outcome.report;
        assert_eq!(report.jobs.len(), 1);
        let result = &report.jobs[0];
        assert_eq!(result.arrival_s, 2.0, "{kind}");
        assert!(
            (result.finish_s - 12.0).abs() < 1e-9,
            "{kind}: finished at {}",
            result.finish_s
        );
        assert!(
            (result.jct_s - 10.0).abs() < 1e-9,
            "{kind}: JCT {}",
            result.jct_s
        );
        for value in [
            report.avg_jct_s,
            report.median_jct_s,
            report.p95_jct_s,
            report.makespan_s,
        ] {
            assert!((value - 10.0).abs() < 1e-9, "{kind}: {report:?}");
        }
        // 12 + 20 + 6 core-seconds over 4 cores × 10 s.
        let cpu = report.utilization["cpus"];
        assert!((cpu - 0.95).abs() < 1e-9, "{kind}: cpu utilisation {cpu}");
        assert_eq!(report.utilization["mem_mib"], 0.0);
        // One group: trivially fair.
        assert_eq!((report.jain_60s_mean, report.jain_60s_min), (1.0, 1.0));
        let mut starts: Vec<(u32, f64)> = outcome
            .trace
            .iter()
            .map(|r| (r.task.stage, r.start_s))
            .collect();
        starts.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        let expected = [
            (0, 2.0),
            (0, 2.0),
            (1, 5.0),
            (2, 10.0),
            (2, 10.0),
            (2, 11.0),
        ];
        assert_eq!(starts.len(), expected.len(), "{kind}");
        for ((stage, start), (want_stage, want_start)) in starts.iter().zip(expected) {
            assert_eq!(*stage, want_stage, "{kind}: {starts:?}");
            assert!((start - want_start).abs() < 1e-9, "{kind}: {starts:?}");
        }
    }
}

/// With a 1 s offer interval, cycles run on whole seconds only: the chain job of the test
/// above, arriving at 2.5, starts at 3, its stages follow at 6, 11 and 12 (the third task of c
/// waits for the cycle after the first two end), and it ends at 13: JCT 10.5.
#[test]
fn an_offer_interval_puts_cycles_on_its_grid() {
    let chain = chain_job(2.5);
    let config = SimConfig {
        offer_interval_s: 1.0,
        ..one_machine("cpus=4,mem_mib=1024")
    };
    for kind in [PolicyKind::Drf, PolicyKind::Fifo, PolicyKind::Tetris] {
        let outcome = simulate(std::slice::from_ref(&chain), &config, kind, None, None).unwrap();
        let mut starts: Vec<f64> = outcome.trace.iter().map(|r| r.start_s).collect();
        starts.sort_by(f64::total_cmp);
        assert_eq!(starts, vec![3.0, 3.0, 6.0, 11.0, 11.0, 12.0], "{kind}");
        assert_eq!(outcome.report.jobs[0].jct_s, 10.5, "{kind}");
    }
}

/// Two single-task jobs that each need the whole machine, arriving at 0 and 1: the second waits
/// for the first. JCTs 4 and 7, average 5.5, nearest-rank median 4, p95 7, makespan 8. One job
/// is in the system in [0, 1), two in [1, 4), one in [4, 8): 11 job-seconds over 8 s.
#[test]
fn a_second_job_waits_for_the_machine() {
    let jobs = vec![
        job(
            "first",
            "default",
            Some(0.0),
            vec![stage(0, &[], &[4.0], res("cpus=4"))],
        ),
        job(
            "second",
            "default",
            Some(1.0),
            vec![stage(0, &[], &[4.0], res("cpus=4"))],
        ),
    ];
    let config = one_machine("cpus=4");
    for kind in PolicyKind::ALL {
        let report = run(&jobs, &config, kind, None).unwrap_or_else(|e| panic!("{kind}: {e}"));
        let jcts: Vec<f64> = report.jobs.iter().map(|j| j.jct_s).collect();
        assert_eq!(jcts, vec![4.0, 7.0], "{kind}");
        assert_eq!(report.avg_jct_s, 5.5);
        assert_eq!(report.median_jct_s, 4.0);
        assert_eq!(report.p95_jct_s, 7.0);
        assert_eq!(report.makespan_s, 8.0);
        assert_eq!(report.mean_jobs_in_system, 11.0 / 8.0, "{kind}");
        assert_eq!((report.speed.jobs, report.speed.tasks), (2, 2), "{kind}");
        assert!(report.speed.wall_s > 0.0 && report.speed.tasks_per_s > 0.0);
    }
}

/// Graphene's matcher may overbook network bandwidth by up to the allowance. Two 10 s tasks
/// asking 600 Mb/s each of a 1000 Mb/s link either run one after the other (20 s) or, when
/// overbooked together, share the link at 1000/1200 of their speed and both take 12 s.
#[test]
fn overbooked_bandwidth_slows_tasks_down_proportionally() {
    let net = vec![job(
        "net",
        "default",
        Some(0.0),
        vec![stage(0, &[], &[10.0, 10.0], res("cpus=1,net_mbps=600"))],
    )];
    let config = one_machine("cpus=4,net_mbps=1000");
    let strict = simulate(&net, &config, PolicyKind::Drf, None, None).unwrap();
    assert_eq!(strict.report.jobs[0].jct_s, 20.0, "DRF never overbooks");
    let graphene = simulate(&net, &config, PolicyKind::Graphene, None, None).unwrap();
    let jct = graphene.report.jobs[0].jct_s;
    let overlapped = graphene.trace[0].start_s == graphene.trace[1].start_s;
    if overlapped {
        assert!(
            (jct - 12.0).abs() < 1e-9,
            "overbooked pair takes 12 s, got {jct}"
        );
        for record in &graphene.trace {
            assert!((record.finish_s - record.start_s - 12.0).abs() < 1e-9);
        }
        // The link carried its capacity, not more, for 12 s of the 12.
        assert!((graphene.report.utilization["net_mbps"] - 1.0).abs() < 1e-9);
    } else {
        assert_eq!(jct, 20.0);
    }
    assert!(
        overlapped,
        "Graphene's matcher overbooks the link when it is worth it"
    );
}

#[test]
fn arrivals_follow_the_spec() {
    let jobs: Vec<_> = (0..4)
        .map(|i| {
            job(
                &format!("j{i}"),
                "default",
                None,
                vec![stage(0, &[], &[1.0], res("cpus=1"))],
            )
        })
        .collect();
    let zero = SimConfig {
        arrivals: ArrivalSpec::Zero,
        ..one_machine("cpus=8")
    };
    let report = run(&jobs, &zero, PolicyKind::Fifo, None).unwrap();
    assert!(report
        .jobs
        .iter()
        .all(|j| j.arrival_s == 0.0 && j.jct_s == 1.0));
    assert_eq!(report.makespan_s, 1.0);

    let poisson = SimConfig {
        arrivals: ArrivalSpec::Poisson { mean_gap_s: 100.0 },
        seed: 4,
        ..one_machine("cpus=8")
    };
    let report = run(&jobs, &poisson, PolicyKind::Fifo, None).unwrap();
    assert_eq!(report.jobs[0].arrival_s, 0.0);
    for j in &report.jobs {
        assert_eq!(j.jct_s, 1.0, "an idle machine runs each job at once");
        assert_eq!(j.finish_s, j.arrival_s + 1.0);
    }
    let last = report.jobs[3].arrival_s;
    assert!(last > 0.0);
    assert_eq!(report.makespan_s, last + 1.0);

    let err = run(&jobs, &one_machine("cpus=8"), PolicyKind::Fifo, None).unwrap_err();
    assert!(
        matches!(&err, SimError::MissingArrival { job } if job == "j0"),
        "{err}"
    );
}

#[test]
fn a_stage_too_big_for_the_machines_is_named() {
    let jobs = vec![
        job(
            "fine",
            "default",
            Some(0.0),
            vec![stage(0, &[], &[1.0], res("cpus=1"))],
        ),
        job(
            "greedy",
            "default",
            Some(0.0),
            vec![
                stage(0, &[], &[1.0], res("cpus=1")),
                stage(7, &[0], &[1.0], res("cpus=2,mem_mib=9000")),
            ],
        ),
    ];
    let err = run(
        &jobs,
        &one_machine("cpus=4,mem_mib=8192"),
        PolicyKind::Drf,
        None,
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(&err, SimError::DemandFitsNoMachine { job, stage: 7, .. } if job == "greedy"),
        "{text}"
    );
    assert!(
        text.contains("`greedy`") && text.contains("stage 7"),
        "{text}"
    );
}
