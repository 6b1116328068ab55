//! The `fullerene` binary as a user runs it.

mod common;

use std::path::{Path, PathBuf};

use common::{run, stderr, stdout};
use fullerene_transport::{Role, TlsMaterial};

fn workload() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/workloads/tpch-decima.jsonl")
}

#[test]
fn help_lists_the_subcommands() {
    let out = run(&["--help"]);
    assert!(out.status.success());
    for sub in ["certs", "sim", "plan"] {
        assert!(
            stdout(&out).contains(sub),
            "--help lacks {sub}: {}",
            stdout(&out)
        );
    }
}

#[test]
fn certs_init_writes_certificates_the_transport_loads() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = run(&[
        "certs",
        "init",
        "--certs-dir",
        d,
        "--masters",
        "3",
        "--agents",
        "2",
        "--frameworks",
        "1",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let agent = TlsMaterial::load(
        &dir.path().join("ca.pem"),
        &dir.path().join("agent-2.pem"),
        &dir.path().join("agent-2-key.pem"),
    )
    .unwrap();
    assert_eq!(agent.identity().role, Role::Agent);
    assert_eq!(agent.identity().id, "agent-2");
    let master = TlsMaterial::load(
        &dir.path().join("ca.pem"),
        &dir.path().join("master-3.pem"),
        &dir.path().join("master-3-key.pem"),
    )
    .unwrap();
    assert_eq!(master.identity().role, Role::Master);

    // A second init refuses to replace the CA, and says how to.
    let again = run(&["certs", "init", "--certs-dir", d]);
    assert!(!again.status.success());
    assert!(
        stderr(&again).contains("already exists"),
        "{}",
        stderr(&again)
    );
    assert!(stderr(&again).contains("--force"), "{}", stderr(&again));
    assert!(
        !stderr(&again).contains("overwrite"),
        "no flag of that name: {}",
        stderr(&again)
    );
}

#[test]
fn a_negative_time_scale_and_a_level_that_is_no_level_are_refused_by_name() {
    let out = run(&[
        "job",
        "run",
        "--workload",
        "w.jsonl",
        "--master-addrs",
        "127.0.0.1:1",
        "--time-scale",
        "-1",
    ]);
    assert!(!out.status.success());
    let text = stderr(&out);
    assert!(
        text.contains("`-1` is not a number > 0") && text.contains("--time-scale"),
        "{text}"
    );
    let out = run(&["--log-level=loud", "sim"]);
    assert!(!out.status.success());
    let text = stderr(&out);
    assert!(
        text.contains("`loud` names no level") && text.contains("debug, trace"),
        "{text}"
    );
}

#[test]
fn an_os_error_is_printed_once() {
    let out = run(&["plan", "--all", "--workload", "/nonexistent/w.jsonl"]);
    assert!(!out.status.success());
    let text = stderr(&out);
    assert_eq!(
        text.matches("No such file or directory").count(),
        1,
        "{text}"
    );
}

#[test]
fn bad_flags_and_inputs_get_clear_errors() {
    let out = run(&["sim", "--machines", "0"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--machines"), "{}", stderr(&out));

    let out = run(&["sim", "--machine-resources", "cpus=4,fpgas=1"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("fpgas"), "{}", stderr(&out));

    // An offer TTL that would overflow the expiry time is refused, not wrapped.
    let out = run(&["master", "--offer-ttl-ms", "18446744073709551615"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--offer-ttl-ms") && stderr(&out).contains("86400000"),
        "{}",
        stderr(&out)
    );

    let out = run(&["sim", "--compare", "graphene,yarn"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("yarn"), "{}", stderr(&out));

    let w = workload();
    let out = run(&[
        "plan",
        "--workload",
        w.to_str().unwrap(),
        "--job",
        "no-such-job",
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("no-such-job"), "{}", stderr(&out));

    let dir = tempfile::tempdir().unwrap();
    let cyclic = dir.path().join("cyclic.jsonl");
    std::fs::write(
        &cyclic,
        "{\"name\":\"c\",\"stages\":[{\"id\":0,\"parents\":[1],\"tasks\":1,\"duration_s\":1},{\"id\":1,\"parents\":[0],\"tasks\":1,\"duration_s\":1}]}\n",
    )
    .unwrap();
    let out = run(&["plan", "--workload", cyclic.to_str().unwrap(), "--all"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("cyclic.jsonl:1") && err.contains("cycle"),
        "{err}"
    );
}

#[test]
fn config_file_supplies_flags_and_rejects_unknown_keys() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("fullerene.toml");
    let certs = dir.path().join("certs");
    std::fs::write(
        &config,
        format!(
            "[certs.init]\ncerts_dir = {:?}\nmasters = 1\nagents = 0\nframeworks = 0\noperators = 0\n",
            certs
        ),
    )
    .unwrap();
    let out = run(&[
        "--config",
        config.to_str().unwrap(),
        "--json",
        "certs",
        "init",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let files: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(files.as_array().unwrap().len(), 2, "the CA and one master");
    assert!(certs.join("master-1.pem").exists());

    std::fs::write(&config, "[certs.init]\ndirectory = \"x\"\n").unwrap();
    let out = run(&[
        "--config",
        config.to_str().unwrap(),
        "certs",
        "init",
        "--certs-dir",
        "y",
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("unknown key `directory`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn plan_reports_a_job_against_its_lower_bound() {
    let w = workload();
    let out = run(&[
        "plan",
        "--workload",
        w.to_str().unwrap(),
        "--job",
        "tpch-q1-2g",
        "--machines",
        "2",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let makespan = report["makespan_s"].as_f64().unwrap();
    let new_lb = report["bounds"]["new_lb"].as_f64().unwrap();
    assert!(new_lb > 0.0 && makespan >= new_lb - 1e-9, "{report}");
    assert_eq!(report["tasks"].as_u64(), Some(417));
}

#[test]
fn sim_compares_policies_on_identical_arrivals() {
    let w = workload();
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("jct.svg");
    let json = dir.path().join("sim.json");
    let out = run(&[
        "sim",
        "--workload",
        w.to_str().unwrap(),
        "--jobs",
        "4",
        "--machines",
        "2",
        "--arrivals",
        "zero",
        "--groups",
        "2",
        "--compare",
        "graphene+carbyne,drf,fifo",
        "--baseline",
        "drf",
        "--plot",
        plot.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("graphene+carbyne"),
        "{}",
        stdout(&out)
    );
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(
        svg.starts_with("<svg") || svg.contains("<svg"),
        "not an SVG"
    );
    let reports: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let reports = reports.as_array().unwrap();
    assert_eq!(reports.len(), 3);
    for r in reports {
        for key in [
            "avg_jct_s",
            "median_jct_s",
            "p95_jct_s",
            "makespan_s",
            "jain_60s_mean",
            "jain_60s_min",
            "utilization",
            "jobs",
        ] {
            assert!(r.get(key).is_some(), "report lacks {key}: {r}");
        }
        assert_eq!(r["jobs"].as_array().unwrap().len(), 4);
    }
}

#[test]
fn masters_and_agents_refuse_the_same_bad_allowances_with_the_same_words() {
    for bad in ["-0.5", "inf", "lots"] {
        let master = run(&["master", &format!("--overbook-allowance={bad}")]);
        let agent = run(&["agent", &format!("--overbook-allowance={bad}")]);
        assert!(
            !master.status.success() && !agent.status.success(),
            "{bad} accepted"
        );
        let reason = |out: &std::process::Output| {
            let text = stderr(out);
            let start = text
                .find(&format!("`{bad}`"))
                .unwrap_or_else(|| panic!("{text}"));
            text[start..].lines().next().unwrap_or_default().to_string()
        };
        assert_eq!(reason(&master), reason(&agent), "{bad}");
    }
}

#[test]
fn chaos_sim_reports_faults_and_checks_and_refuses_unknown_faults() {
    let out = run(&[
        "chaos", "sim", "--seeds", "3", "--agents", "5", "--jobs", "3", "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["seeds"], 3);
    assert_eq!(report["violations"].as_array().map(Vec::len), Some(0));
    assert_eq!(report["jobs_completed"], report["jobs_submitted"]);
    assert!(report["checks"]["at-most-one-instance"].as_u64() > Some(0));
    assert!(report["faults_injected"]
        .as_object()
        .is_some_and(|f| !f.is_empty()));
    assert!(
        stderr(&out).is_empty(),
        "chaos sim logs only when asked: {}",
        stderr(&out)
    );

    // One seed replays into a trace file.
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.txt");
    let out = run(&[
        "chaos",
        "sim",
        "--seed",
        "2",
        "--agents",
        "5",
        "--jobs",
        "3",
        "--faults",
        "partition,pause",
        "--trace",
        trace.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&trace).expect("trace written");
    assert!(
        text.contains("subscribed as"),
        "{}",
        &text[..text.len().min(2_000)]
    );
    assert!(
        stdout(&out).contains("one-leader-per-term"),
        "{}",
        stdout(&out)
    );

    let out = run(&["chaos", "sim", "--faults", "gremlins"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("unknown fault kind `gremlins`"),
        "{}",
        stderr(&out)
    );
}

/// At its default level a master says who it is, where it listens and where its data is, in a
/// log without colors when it goes to a file or a pipe (here a pipe); this one then stops,
/// having no state and no `--bootstrap`.
#[test]
fn a_master_logs_its_start_at_the_default_level_without_colors() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let data = dir.path().join("data");
    let (certs, data) = (certs.to_str().unwrap(), data.to_str().unwrap());
    let init = run(&["certs", "init", "--certs-dir", certs]);
    assert!(init.status.success(), "{}", stderr(&init));
    let out = run(&[
        "master",
        "--id",
        "1",
        "--listen",
        "127.0.0.1:0",
        "--peers",
        "1=127.0.0.1:0",
        "--data-dir",
        data,
        "--certs-dir",
        certs,
    ]);
    assert!(!out.status.success());
    let text = stderr(&out);
    assert!(!text.contains('\u{1b}'), "escape codes:\n{text}");
    let start = text
        .lines()
        .find(|l| l.contains("master starting"))
        .unwrap_or_else(|| panic!("no start line:\n{text}"));
    assert!(
        start.contains("INFO") && start.contains("master=1"),
        "{start}"
    );
    assert!(start.contains(&format!("data_dir={data}")), "{start}");
    assert!(text.contains("--bootstrap"), "{text}");
}
