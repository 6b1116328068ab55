//! The web UI (issue 19, points 1 and 7) on real processes: how a browser authenticates (a
//! token exchanged for a session cookie, cross-site writes refused), then the page itself in
//! headless Chromium driven over WebDriver ([`fullerene_tests::webdriver`]) against one local cluster: the
//! overview shows the agents, an agent drained with the page's button gets no new tasks, a
//! job's page updates as its tasks finish, the teardown button kills a running job, and a
//! task's log shows what the task printed (when the master serves task logs).
//!
//! The browser test needs `chromium` and `chromedriver` on the PATH (`scripts/install-browser`,
//! which `scripts/test` runs as root); without them it prints why it is skipped and returns.
//! Screenshots go to `$FULLERENE_UI_SCREENSHOTS`, else `<target dir>/ui-screenshots/`.
//!
//! Needs the binary: `cargo build -p fullerene` first (see `fullerene_tests::fullerene_binary`).

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use fullerene_chaos::ApiClient;
use fullerene_proto::http::SessionDocument;
use fullerene_proto::messages::{FrameworkRequest, Leftover};
use fullerene_tests::webdriver::Chromium;
use fullerene_tests::{demand, resources, shell_task, MasterCluster, FAST_LIVENESS, KILL_GRACE_MS};
use fullerene_transport::Role;

/// Generous: only a hang fails a test on a loaded machine.
const WAIT: Duration = Duration::from_secs(30);

/// Each agent is the workloads' reference machine, running sleep tasks.
const AGENT_FLAGS: [&str; 2] = [
    "--resources",
    "cpus=16,mem_mib=65536,disk_mbps=1000,net_mbps=10000",
];

/// Starts `fullerene job run` of job `name` (written to `file`) at `time_scale` real seconds
/// per workload second (`tpch-q6-2g`: 12 tasks of 2.6 to 4.2 s, then one of 1.1 s); its log
/// is `file` with the extension `.log`.
fn start_job_run(
    cluster: &MasterCluster,
    file: &str,
    name: &str,
    time_scale: f64,
) -> (Child, PathBuf) {
    let path = cluster.tpch_workload(file, &[name]);
    let log = path.with_extension("log");
    let child = cluster
        .job_run_command(&path, time_scale)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&log).expect("create the job's log"))
        .spawn()
        .expect("start fullerene job run");
    (child, log)
}

/// The leader's `/state`, panicking with the logs when no master answers in time.
fn state(cluster: &MasterCluster) -> serde_json::Value {
    let started = Instant::now();
    loop {
        if let Some(state) = cluster.http_state() {
            return state;
        }
        assert!(started.elapsed() < WAIT, "no /state\n{}", cluster.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The id of the framework running job `name`, once it has subscribed.
fn framework_of(cluster: &MasterCluster, name: &str) -> String {
    let started = Instant::now();
    loop {
        let state = state(cluster);
        let found = state["frameworks"].as_array().and_then(|frameworks| {
            frameworks
                .iter()
                .find(|f| f["name"] == name && f["torn_down"] == false)
                .and_then(|f| f["id"].as_str().map(str::to_string))
        });
        if let Some(id) = found {
            return id;
        }
        assert!(
            started.elapsed() < WAIT,
            "job {name} never subscribed\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A client that presents no certificate (as a browser does) and sends no token.
fn browser_like(cluster: &MasterCluster) -> ApiClient {
    let tls = cluster.tls_of(Role::Operator, 1).expect("the cluster's CA");
    ApiClient::anonymous(&tls, Duration::from_secs(5)).expect("a client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_trades_its_token_for_a_cookie_and_cross_site_writes_are_refused() {
    let cluster = MasterCluster::start_with(1, 1, 0, &[]);
    assert!(
        cluster.wait_for_leader(WAIT).is_some(),
        "{}",
        cluster.logs()
    );
    let http = cluster.http_addrs[&1];
    let browser = browser_like(&cluster);
    let tokens = &cluster.http_tokens;

    // The page is served to anyone (it is the binary's code); the data is not.
    let page = browser.get(http, "/").expect("GET /");
    assert_eq!(page.code, 200, "{page:?}");
    assert!(page.body.contains("/ui/app.js"), "{}", page.body);
    assert!(
        page.header("content-security-policy")
            .is_some_and(|policy| policy.contains("script-src 'self'")),
        "{page:?}"
    );
    let script = browser.get(http, "/ui/app.js").expect("GET /ui/app.js");
    assert!(script.code == 200 && script.body.contains("X-Fullerene-CSRF"));
    assert_eq!(browser.get(http, "/state").expect("GET /state").code, 401);

    // Logging in: from another site (an Origin without the custom header) refused; from the
    // page, a locked-down cookie holding the token.
    let bearer = format!("Authorization: Bearer {}", tokens.read);
    let forged = browser
        .request_with_headers(
            "POST",
            http,
            "/ui/session",
            &[&bearer, "Origin: https://elsewhere.example"],
        )
        .expect("POST /ui/session");
    assert_eq!(forged.code, 403, "{forged:?}");
    let login = browser
        .request_with_headers(
            "POST",
            http,
            "/ui/session",
            &[&bearer, "X-Fullerene-CSRF: 1"],
        )
        .expect("POST /ui/session");
    assert_eq!(login.code, 200, "{login:?}");
    let cookie = login.header("set-cookie").expect("a cookie").to_string();
    for attribute in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(attribute), "{cookie} lacks {attribute}");
    }
    let read_cookie = format!("Cookie: fullerene_session={}", tokens.read);
    let who = browser
        .request_with_headers("GET", http, "/ui/session", &[&read_cookie])
        .expect("GET /ui/session");
    let who: SessionDocument = who.json().expect("a session document");
    assert_eq!(
        (who.who.as_str(), who.scope.as_deref(), who.cookie),
        ("token reader", Some("read"), true)
    );
    let read = browser
        .request_with_headers("GET", http, "/state", &[&read_cookie])
        .expect("GET /state");
    assert_eq!(read.code, 200, "the cookie authenticates reads: {read:?}");
    let wrong = browser
        .request_with_headers("GET", http, "/state", &["Cookie: fullerene_session=nope"])
        .expect("GET /state");
    assert_eq!(wrong.code, 401, "{wrong:?}");

    // Writes: a cookie alone is not enough (the custom header must come too), and a read
    // token's cookie may not write at all.
    let write_cookie = format!("Cookie: fullerene_session={}", tokens.write);
    let without = browser
        .request_with_headers("DELETE", http, "/agents/agent-9/drain", &[&write_cookie])
        .expect("DELETE");
    assert!(
        without.code == 403 && without.body.contains("X-Fullerene-CSRF"),
        "{without:?}"
    );
    let with = browser
        .request_with_headers(
            "DELETE",
            http,
            "/agents/agent-9/drain",
            &[&write_cookie, "X-Fullerene-CSRF: 1"],
        )
        .expect("DELETE");
    assert!(
        ![401, 403].contains(&with.code) && !with.body.contains("X-Fullerene-CSRF"),
        "the write reached the state machine (which knows no agent-9): {with:?}"
    );
    let read_only = browser
        .request_with_headers(
            "DELETE",
            http,
            "/agents/agent-9/drain",
            &[&read_cookie, "X-Fullerene-CSRF: 1"],
        )
        .expect("DELETE");
    assert!(
        read_only.code == 403 && read_only.body.contains("scope"),
        "{read_only:?}"
    );

    let logout = browser
        .request_with_headers("DELETE", http, "/ui/session", &[&read_cookie])
        .expect("DELETE /ui/session");
    assert!(
        logout.code == 200
            && logout
                .header("set-cookie")
                .is_some_and(|c| c.contains("Max-Age=0")),
        "{logout:?}"
    );
}

/// Where screenshots go: `$FULLERENE_UI_SCREENSHOTS`, else `ui-screenshots/` in the target
/// directory the test executable was built in.
fn screenshot_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FULLERENE_UI_SCREENSHOTS") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("the test executable has a path");
    exe.ancestors()
        .nth(3)
        .map_or_else(std::env::temp_dir, Path::to_path_buf)
        .join("ui-screenshots")
}

/// The page in Chromium, with the waits a page that re-renders itself needs.
struct Browser {
    chromium: Chromium,
    screenshots: PathBuf,
}

impl Browser {
    /// The text of the first element matching `css`, once `wanted` holds of it.
    fn wait_text(&self, css: &str, wanted: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < WAIT {
            // The page re-renders every poll: an element may go stale between find and read.
            match self.chromium.text(css) {
                Ok(text) if wanted(&text) => return text,
                Ok(text) => last = text,
                Err(error) => last = error,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let page = self.chromium.text("body").unwrap_or_else(|e| e);
        panic!("`{css}` never became as wanted; last `{last}`; the page:\n{page}");
    }

    /// Clicks the first element matching `css`, retrying while the page re-renders it.
    fn click(&self, css: &str) {
        let started = Instant::now();
        loop {
            match self.chromium.click(css) {
                Ok(()) => return,
                Err(error) if started.elapsed() > WAIT => {
                    let page = self.chromium.text("body").unwrap_or_else(|e| e);
                    panic!("cannot click `{css}`: {error}; the page:\n{page}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Saves a screenshot as `<name>.png`.
    fn screenshot(&self, name: &str) {
        let png = self.chromium.screenshot().expect("a screenshot");
        let path = self.screenshots.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("save the screenshot");
        eprintln!("screenshot: {}", path.display());
    }

    fn goto(&self, http: SocketAddr, fragment: &str) {
        self.chromium
            .goto(&format!("https://{http}/{fragment}"))
            .expect("navigate");
    }
}

/// Every agent a task in `state` runs on.
fn agents_in_use(state: &serde_json::Value) -> Vec<String> {
    state["tasks"]
        .as_array()
        .map(|tasks| {
            tasks
                .iter()
                .filter_map(|t| t["agent_id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_the_ui_shows_the_cluster_drains_follows_a_job_and_kills() {
    let mut cluster = MasterCluster::start_with(1, 1, 2, &FAST_LIVENESS);
    let chromium = match Chromium::start(&cluster.dir().join("chromedriver.log")) {
        Ok(chromium) => chromium,
        Err(why) => {
            eprintln!("SKIPPED: the web UI's browser test needs Chromium: {why}");
            return;
        }
    };
    let screenshots = screenshot_dir();
    std::fs::create_dir_all(&screenshots).expect("the screenshots' directory");
    let browser = Browser {
        chromium,
        screenshots,
    };
    cluster.spawn_agent(1, &AGENT_FLAGS);
    cluster.spawn_agent(2, &AGENT_FLAGS);
    assert!(
        cluster.wait_for_active_agents(2, WAIT),
        "{}",
        cluster.logs()
    );
    let http = cluster.http_addrs[&1];

    // The one-time link `fullerene dev` prints logs the page in; the overview lists the agents.
    browser.goto(http, &format!("#token={}", cluster.http_tokens.write));
    browser.wait_text("#agent-count", |text| text == "2");
    for agent in ["agent-1", "agent-2"] {
        browser.wait_text(&format!("tr[data-agent='{agent}']"), |text| {
            text.contains("Active")
        });
    }
    let url = browser.chromium.url().expect("a URL");
    assert!(
        !url.contains("token"),
        "the token must leave the address bar: {url}"
    );

    // Drain agent-2 with its button: the master records the drain.
    browser.goto(http, "#/agents");
    browser.click("#drain-agent-2");
    browser.wait_text("tr[data-agent='agent-2'] .state", |text| {
        text.starts_with("drain")
    });
    let drained = state(&cluster)["agents"]
        .as_array()
        .and_then(|agents| agents.iter().find(|a| a["id"] == "agent-2").cloned())
        .expect("agent-2");
    assert!(!drained["drain"].is_null(), "{drained}");
    browser.screenshot("agents-drained");

    // A job runs; its page shows its DAG and changes as its tasks finish; nothing lands on the
    // drained agent meanwhile.
    let (mut run, log) = start_job_run(&cluster, "q6.jsonl", "tpch-q6-2g", 2.0);
    let framework = framework_of(&cluster, "tpch-q6-2g");
    browser.goto(http, &format!("#/jobs/{framework}/tpch-q6-2g"));
    let first = browser.wait_text("#job-tasks", |text| text.to_lowercase().contains("running"));
    // The DAG is drawn (read through the retrying helper: the page re-renders it every poll,
    // and a one-shot read failed on an element gone stale between find and read).
    browser.wait_text("#dag g[data-stage]", |_| true);
    let started = Instant::now();
    let mut seen = vec![first.clone()];
    let status = loop {
        assert!(
            !agents_in_use(&state(&cluster)).contains(&"agent-2".to_string()),
            "a task was launched on the drained agent\n{}",
            cluster.logs()
        );
        if let Ok(text) = browser.chromium.text("#job-tasks") {
            if seen.last() != Some(&text) {
                seen.push(text);
            }
        }
        if let Some(status) = run.try_wait().expect("job run") {
            break status;
        }
        assert!(started.elapsed() < WAIT, "the job did not finish");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "job run failed: see {}", log.display());
    assert!(
        seen.len() >= 2,
        "the job's page never changed while its tasks ran: {seen:?}"
    );
    // Once done, the framework's row says it was torn down (its job over).
    browser.goto(http, "#/frameworks");
    browser.wait_text(&format!("tr[data-framework='{framework}']"), |text| {
        text.contains("torn down")
    });

    // Undrain, then kill a slow job with the teardown button (two clicks: arm, confirm).
    browser.goto(http, "#/agents");
    browser.click("#undrain-agent-2");
    browser.wait_text("tr[data-agent='agent-2'] .state", |text| text == "Active");
    let (mut slow_run, _) = start_job_run(&cluster, "slow.jsonl", "tpch-q6-2g", 20.0);
    let victim = framework_of(&cluster, "tpch-q6-2g");
    // The screenshots of a busy cluster: the overview and the running job's page.
    browser.goto(http, "#/overview");
    browser.wait_text("#counts", |text| text.contains("Running"));
    browser.screenshot("overview");
    browser.goto(http, &format!("#/jobs/{victim}/tpch-q6-2g"));
    browser.wait_text("#job-tasks", |text| text.to_lowercase().contains("running"));
    browser.screenshot("job");
    browser.goto(http, "#/frameworks");
    browser.wait_text(&format!("tr[data-framework='{victim}']"), |text| {
        text.contains("connected")
    });
    browser.click(&format!("#teardown-{victim}"));
    browser.click(&format!("#teardown-{victim}.armed"));
    let started = Instant::now();
    loop {
        let state = state(&cluster);
        let gone = state["frameworks"].as_array().is_some_and(|frameworks| {
            frameworks
                .iter()
                .any(|f| f["id"] == victim.as_str() && f["torn_down"] == true)
        }) && !state["tasks"]
            .as_array()
            .is_some_and(|tasks| tasks.iter().any(|t| t["framework_id"] == victim.as_str()));
        if gone {
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "the kill button did not tear {victim} down\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = slow_run.kill();
    let _ = slow_run.wait();

    task_log_in_the_browser(&cluster, &browser, http).await;
}

/// A task's log in the page shows what the task printed; skipped, saying so, when this master
/// does not serve task logs.
async fn task_log_in_the_browser(cluster: &MasterCluster, browser: &Browser, http: SocketAddr) {
    let probe = cluster
        .api()
        .get(
            http,
            "/frameworks/none/tasks/none/files/stdout?offset=0&length=1",
        )
        .expect("GET a task's stdout");
    if probe.code == 404 && probe.body.contains("no such path") {
        eprintln!(
            "SKIPPED (task logs): this master does not serve /frameworks/.../files/stdout; the \
             page says so instead of showing the log"
        );
        browser.goto(http, "#/task/none/none");
        browser.wait_text("#view", |text| {
            text.contains("not available on this master")
        });
        return;
    }
    let mut framework = cluster.test_framework(2, "printer");
    let framework_id = framework.registered(WAIT).await.expect("subscribed");
    framework.call(FrameworkRequest::UpdateDemand(demand(
        &resources("cpus=1,mem_mib=64"),
        1,
    )));
    let offer = framework
        .offers(WAIT)
        .await
        .and_then(|offers| offers.into_iter().next())
        .unwrap_or_else(|| panic!("no offer\n{}", cluster.logs()));
    let task = shell_task(
        "printer",
        "echo hello-from-the-task; sleep 30",
        "cpus=1,mem_mib=64",
        KILL_GRACE_MS,
    );
    framework.call(FrameworkRequest::Accept {
        offer_ids: vec![offer.id],
        tasks: vec![task],
        leftover: Leftover::Decline { refuse_ms: 500 },
    });
    browser.goto(http, &format!("#/task/{framework_id}/printer"));
    browser.click("#log-follow");
    browser.wait_text("#log-text", |text| text.contains("hello-from-the-task"));
    browser.screenshot("task-log");
    framework.teardown(Duration::from_secs(5)).await;
}
