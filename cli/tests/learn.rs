//! `fullerene learn` end to end at a tiny size, as CI proves that training works: a few
//! iterations write a model, a checkpoint and the learning curve, a resumed run continues
//! where it stopped, `eval` runs the trained model beside the heuristics, and a damaged model
//! file is refused with its name. No figure that depends on luck is asserted.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The shared TPC-H workload, beside the checkout.
fn workload() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/workloads/tpch-decima.jsonl")
}

fn fullerene(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fullerene"));
    cmd.env_remove("FULLERENE_CONFIG")
        .env_remove("FULLERENE_LOG")
        .env("FULLERENE_WORKLOAD", workload())
        .current_dir(dir);
    cmd
}

/// Five executors, three jobs per episode, two episodes per iteration.
const TINY: [&str; 6] = ["--executor-slots", "5", "--jobs", "3", "--episodes", "2"];

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("fullerene runs");
    assert!(
        out.status.success(),
        "failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn curve(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("the curve was written")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[test]
fn training_writes_a_model_that_resumes_and_evaluates() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.model");
    let curve_file = dir.path().join("curve.jsonl");
    let train = |iterations: &str, resume: bool| {
        let mut cmd = fullerene(dir.path());
        cmd.args(["--json", "learn", "train", "--iterations", iterations])
            .args(TINY)
            .arg("--out")
            .arg(&model)
            .arg("--curve")
            .arg(&curve_file);
        if resume {
            cmd.arg("--resume");
        }
        run(&mut cmd)
    };
    train("2", false);
    assert!(model.exists());
    assert!(dir.path().join("m.model.ckpt").exists());
    let points = curve(&curve_file);
    assert_eq!(points.len(), 2);
    for (i, p) in points.iter().enumerate() {
        assert_eq!(p["iteration"].as_u64(), Some(i as u64));
        let jct = p["mean_jct_s"].as_f64().unwrap();
        assert!(jct.is_finite() && jct > 0.0, "{p}");
        assert!(p["entropy"].as_f64().unwrap() > 0.0, "{p}");
        assert!(p["fair_jct_s"].as_f64().unwrap() > 0.0, "{p}");
    }
    // The learning curve plots.
    let svg = dir.path().join("curve.svg");
    run(fullerene(dir.path())
        .args(["learn", "plot", "--average-iterations", "2", "--curve"])
        .arg(&curve_file)
        .arg("--out")
        .arg(&svg));
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.contains("<svg") && drawn.contains("fair"), "{drawn}");
    // Resumed: one more iteration, numbered on from the checkpoint.
    train("3", true);
    let points = curve(&curve_file);
    assert_eq!(points.len(), 3);
    assert_eq!(points[2]["iteration"].as_u64(), Some(2));

    // `learn eval` of the model with `policies`, on `seeds` tiny episodes: its JSON report.
    let eval_with = |policies: &str, seeds: &str, extra: &[&str]| -> Value {
        let out = run(fullerene(dir.path())
            .args([
                "--json",
                "learn",
                "eval",
                "--executor-slots",
                "5",
                "--jobs",
                "3",
            ])
            .args(["--seeds", seeds, "--policies", policies])
            .args(extra)
            .arg("--model")
            .arg(&model));
        serde_json::from_slice(&out.stdout).expect("eval prints JSON")
    };
    let eval = |policies: &str, seeds: &str| eval_with(policies, seeds, &[]);
    let report = eval("fifo", "2");
    let names: Vec<&str> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["policy"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["fifo", "decima"]);
    for r in report["results"].as_array().unwrap() {
        let jct = r["average_jct_s"].as_f64().unwrap();
        assert!(jct.is_finite() && jct > 0.0, "{r}");
    }
    // The model alone.
    let report = eval("none", "1");
    assert_eq!(report["results"].as_array().map(Vec::len), Some(1));
    // Sampled actions (the default, as Decima evaluates) draw from each episode's seed: the
    // same seeds give the same figures; the most likely actions give others (the model is
    // barely trained, so its probabilities are far from certain).
    let decima = |report: &Value| report["results"][0].clone();
    let sampled = decima(&eval("none", "3"));
    assert_eq!(sampled, decima(&eval("none", "3")));
    let greedy = decima(&eval_with("none", "3", &["--action-choice", "greedy"]));
    assert_ne!(sampled["mean_jct_s"], greedy["mean_jct_s"]);

    let damaged = dir.path().join("damaged.model");
    let mut bytes = std::fs::read(&model).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&damaged, bytes).unwrap();
    let out = fullerene(dir.path())
        .args(["learn", "eval", "--seeds", "1", "--model"])
        .arg(&damaged)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("damaged.model") && stderr.contains("corrupt"),
        "{stderr}"
    );

    // A warm start: the trained model fine-tuned under Poisson arrivals, a new run.
    let tuned = dir.path().join("tuned.model");
    let warm = |init: &Path| {
        let mut cmd = fullerene(dir.path());
        cmd.args(["--json", "learn", "train", "--iterations", "1"])
            .args(TINY)
            .args(["--setting", "poisson", "--entropy-start", "0.01"])
            .arg("--init-model")
            .arg(init)
            .arg("--out")
            .arg(&tuned);
        cmd
    };
    let out = run(&mut warm(&model));
    let report: Value = serde_json::from_slice(&out.stdout).expect("train prints JSON");
    assert_eq!(report[0]["iterations"].as_u64(), Some(1), "{report}");
    assert_eq!(report[1]["entropy_weight"].as_f64(), Some(0.01), "{report}");
    assert!(tuned.exists());
    let out = warm(&damaged).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--init-model") && stderr.contains("damaged.model"),
        "{stderr}"
    );
    let out = warm(&model).arg("--resume").output().unwrap();
    assert!(
        !out.status.success(),
        "--init-model with --resume was taken"
    );
}
