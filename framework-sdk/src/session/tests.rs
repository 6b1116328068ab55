use std::sync::Arc;

use fullerene_scheduling::testkit::res;

use super::*;
use crate::testkit::{job, stage};

fn slot() -> ResourceVec {
    res("cpus=1")
}

/// `n` one-cpu machines, all free.
fn executors(n: usize) -> Vec<SessionOffer> {
    (0..n)
        .map(|machine| SessionOffer {
            machine,
            free: slot(),
            capacity: slot(),
        })
        .collect()
}

/// A chain of two stages, `tasks` each, of one-second one-cpu tasks.
fn chain(name: &str, tasks: usize) -> Arc<Job> {
    two_stages(name, tasks, &[0])
}

/// Two stages of `tasks` one-second one-cpu tasks each, the second's parents `parents`.
fn two_stages(name: &str, tasks: usize, parents: &[u32]) -> Arc<Job> {
    let durations = vec![1.0; tasks];
    Arc::new(job(
        name,
        "default",
        None,
        vec![
            stage(0, &[], &durations, slot()),
            stage(1, parents, &durations, slot()),
        ],
    ))
}

fn session(kind: SessionPolicyKind, max_limit: usize) -> Session {
    Session::new(kind.build(), max_limit, slot().scale(max_limit as f64))
}

fn running_by_job(session: &Session) -> Vec<usize> {
    session
        .jobs()
        .iter()
        .map(|j| j.state.num_running())
        .collect()
}

/// Records every decision's candidates and answers with a fixed limit on the last one.
struct Scripted {
    limit: usize,
    seen: Vec<Vec<StageCandidate>>,
}

impl SessionPolicy for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    fn choose(&mut self, _view: &SessionView<'_>, candidates: &[StageCandidate]) -> SessionAction {
        self.seen.push(candidates.to_vec());
        SessionAction {
            candidate: candidates.len() - 1,
            limit: self.limit,
        }
    }
}

#[test]
fn fifo_gives_the_first_job_every_executor_it_can_use() {
    let mut s = session(SessionPolicyKind::Fifo, 4);
    s.add_job(chain("a", 3), 0.0, None);
    s.add_job(chain("b", 3), 1.0, None);
    let launches = s.schedule(&executors(4), 1.0);
    assert_eq!(launches.len(), 4);
    assert_eq!(
        running_by_job(&s),
        vec![3, 1],
        "a's 3 runnable tasks, then b"
    );
    assert!(launches.iter().all(|l| l.decided));
    assert_eq!(s.decisions(), 2);
}

#[test]
fn fair_splits_the_executors_evenly() {
    let mut s = session(SessionPolicyKind::Fair, 4);
    s.add_job(chain("a", 10), 0.0, None);
    s.add_job(chain("b", 10), 0.0, None);
    s.schedule(&executors(4), 0.0);
    assert_eq!(running_by_job(&s), vec![2, 2]);
}

/// Job `a` (4 + 4 tasks) runs its first stage on all 4 executors, job `b` (10 + 10) arrives,
/// and `a`'s first stage ends: who gets the 4 freed executors, `a`'s second stage or `b`?
fn after_the_first_job_frees_its_executors(kind: SessionPolicyKind) -> Vec<usize> {
    let mut s = session(kind, 4);
    let a = s.add_job(chain("a", 4), 0.0, None);
    let first = s.schedule(&executors(4), 0.0);
    assert_eq!(first.len(), 4);
    s.add_job(chain("b", 10), 0.5, None);
    for launch in first {
        s.task_finished(a, launch.task, 1.0).unwrap();
    }
    s.schedule(&executors(4), 1.0);
    running_by_job(&s)
}

#[test]
fn dynamic_partition_lets_a_job_keep_the_executors_it_frees() {
    // decima-sim's fair scheduler: the source job keeps its executors while it has work,
    // above the equal share (2 of 4) it would get; the rebalancing fair scheduler splits them.
    assert_eq!(
        after_the_first_job_frees_its_executors(SessionPolicyKind::DynamicPartition),
        vec![4, 0]
    );
    assert_eq!(
        after_the_first_job_frees_its_executors(SessionPolicyKind::Fair),
        vec![2, 2]
    );
}

#[test]
fn dynamic_partition_serves_jobs_in_arrival_order_up_to_an_equal_share() {
    // Free executors no job worked for: 6 over 3 jobs with tasks to launch, a cap of 2 each.
    let mut s = session(SessionPolicyKind::DynamicPartition, 6);
    for name in ["a", "b", "c"] {
        s.add_job(chain(name, 10), 0.0, None);
    }
    s.schedule(&executors(6), 0.0);
    assert_eq!(running_by_job(&s), vec![2, 2, 2]);
    // In arrival order, not the fewest running first: with one free executor, the first job
    // (1 running) gets it before the second (none running), both below their cap of 2.
    let one_more = |kind: SessionPolicyKind| {
        let mut s = session(kind, 4);
        s.add_job(chain("a", 10), 0.0, None);
        s.schedule(&executors(1), 0.0);
        s.add_job(chain("b", 10), 0.5, None);
        let fresh = SessionOffer {
            machine: 1,
            free: slot(),
            capacity: slot(),
        };
        s.schedule(&[fresh], 0.5);
        running_by_job(&s)
    };
    assert_eq!(one_more(SessionPolicyKind::DynamicPartition), vec![2, 0]);
    assert_eq!(one_more(SessionPolicyKind::Fair), vec![1, 1]);
    // Two jobs of two independent stages, 4 executors' worth of limit on 8 machines: each
    // job's first stage up to the cap of 2, then, every job at its cap, one more task for
    // the job running the fewest, each time (decima-sim would leave those executors idle; a
    // session policy always chooses).
    let mut s = session(SessionPolicyKind::DynamicPartition, 4);
    for name in ["a", "b"] {
        s.add_job(two_stages(name, 10, &[]), 0.0, None);
    }
    s.schedule(&executors(8), 0.0);
    assert_eq!(running_by_job(&s), vec![3, 3]);
    let stages: Vec<usize> = s.jobs()[1]
        .state
        .running_tasks()
        .map(|(task, _, _)| task.stage())
        .collect();
    assert_eq!(
        stages,
        [0, 0, 1],
        "b: its cap on its first stage, then one more"
    );
}

#[test]
fn sjf_serves_the_job_with_the_least_work_first() {
    let mut s = session(SessionPolicyKind::Sjf, 4);
    s.add_job(chain("long", 10), 0.0, None);
    s.add_job(chain("short", 2), 0.0, None);
    s.schedule(&executors(3), 0.0);
    assert_eq!(running_by_job(&s), vec![1, 2], "short's 2 tasks, then long");
}

#[test]
fn an_action_launches_at_least_one_task_and_at_most_up_to_the_limit() {
    let policy = Scripted {
        limit: 0,
        seen: Vec::new(),
    };
    let mut s = Session::new(Box::new(policy), 8, slot().scale(8.0));
    s.add_job(chain("a", 5), 0.0, None);
    // A limit below what the job holds is raised to one more task.
    let launches = s.schedule(&executors(4), 0.0);
    assert_eq!(launches.len(), 1);
    assert_eq!(s.jobs()[0].limit, Some(1));
    // A limit of 3 on 4 free executors launches 3 tasks, not 4.
    let policy = Scripted {
        limit: 3,
        seen: Vec::new(),
    };
    let mut s = Session::new(Box::new(policy), 8, slot().scale(8.0));
    s.add_job(chain("a", 5), 0.0, None);
    assert_eq!(s.schedule(&executors(4), 0.0).len(), 3);
}

/// Takes the last candidate at its first decision, then the first: an order that changes.
struct LastThenFirst(usize);

impl SessionPolicy for LastThenFirst {
    fn name(&self) -> &str {
        "last-then-first"
    }

    fn choose(&mut self, view: &SessionView<'_>, candidates: &[StageCandidate]) -> SessionAction {
        self.0 += 1;
        SessionAction {
            candidate: if self.0 == 1 { candidates.len() - 1 } else { 0 },
            limit: view.max_limit,
        }
    }
}

#[test]
fn a_job_gets_the_executors_that_worked_for_it_first() {
    // Job b is served first and runs on machines 0-1, job a on 2-3. When both first stages
    // end, a is served first: its second stage goes back to machines 2-3 (first fit would
    // have moved both jobs' executors).
    let mut s = Session::new(Box::new(LastThenFirst(0)), 4, slot().scale(4.0));
    let a = s.add_job(chain("a", 2), 0.0, None);
    let b = s.add_job(chain("b", 2), 0.0, None);
    let first = s.schedule(&executors(4), 0.0);
    let machines = |launches: &[SessionLaunch], job| {
        let mut m: Vec<usize> = launches
            .iter()
            .filter(|l| l.job == job)
            .map(|l| l.machine)
            .collect();
        m.sort_unstable();
        m
    };
    assert_eq!(
        (machines(&first, a), machines(&first, b)),
        (vec![2, 3], vec![0, 1])
    );
    for l in &first {
        s.task_finished(l.job, l.task, 1.0).unwrap();
    }
    let second = s.schedule(&executors(4), 1.0);
    assert_eq!(
        (machines(&second, a), machines(&second, b)),
        (vec![2, 3], vec![0, 1])
    );
}

#[test]
fn a_stage_is_chosen_once_per_event_and_every_event_ends() {
    // Two jobs of one stage each on 6 executors, a policy that always asks for limit 1: each
    // stage is chosen once, so the event ends with 2 tasks running and 4 executors idle.
    let policy = Scripted {
        limit: 1,
        seen: Vec::new(),
    };
    let mut s = Session::new(Box::new(policy), 6, slot().scale(6.0));
    s.add_job(chain("a", 5), 0.0, None);
    s.add_job(chain("b", 5), 0.0, None);
    let launches = s.schedule(&executors(6), 0.0);
    assert_eq!(launches.len(), 2);
    assert_eq!(s.decisions(), 2);
}

#[test]
fn an_executor_keeps_working_on_its_stage_without_a_decision() {
    let mut s = session(SessionPolicyKind::Fifo, 2);
    let a = s.add_job(chain("a", 4), 0.0, None);
    let first = s.schedule(&executors(2), 0.0);
    assert_eq!(first.len(), 2);
    let decisions = s.decisions();
    // Machine 0 finishes its task: it takes the stage's next task by itself.
    s.task_finished(a, first[0].task, 1.0).unwrap();
    let next = s.schedule(&executors(1), 1.0);
    assert_eq!(next.len(), 1);
    assert!(!next[0].decided);
    assert_eq!(next[0].task.stage(), first[0].task.stage());
    assert_eq!(s.decisions(), decisions);
}

#[test]
fn room_a_task_freed_keeps_working_on_that_tasks_stage() {
    // Limit 1 per job, the last candidate first: b, then a, on one machine of two slots.
    let scripted = Scripted {
        limit: 1,
        seen: Vec::new(),
    };
    let mut s = Session::new(Box::new(scripted), 4, res("cpus=4"));
    let a = s.add_job(chain("a", 3), 0.0, None);
    let b = s.add_job(chain("b", 3), 0.0, None);
    let machine = |free: ResourceVec| SessionOffer {
        machine: 0,
        free,
        capacity: res("cpus=2"),
    };
    let first = s.schedule(&[machine(res("cpus=2"))], 0.0);
    assert_eq!(first.iter().map(|l| l.job).collect::<Vec<_>>(), vec![b, a]);
    let decisions = s.decisions();
    // b's task frees its slot: the slot takes b's next task without a decision, though a's
    // stage was placed on the machine last.
    s.task_finished(b, first[0].task, 1.0).unwrap();
    let next = s.schedule(&[machine(slot())], 1.0);
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].job, b);
    assert!(!next[0].decided);
    assert_eq!(s.decisions(), decisions);
}

#[test]
fn a_finished_job_leaves_the_session_and_stale_reports_are_errors() {
    let mut s = session(SessionPolicyKind::Fifo, 2);
    let a = s.add_job(chain("a", 1), 0.0, None);
    let mut t = 0.0;
    let mut done = None;
    while done.is_none() {
        let launches = s.schedule(&executors(2), t);
        assert!(!launches.is_empty(), "the job stalled");
        t += 1.0;
        for l in launches {
            done = s.task_finished(l.job, l.task, t).unwrap().or(done);
        }
    }
    let finished = done.unwrap();
    assert_eq!(finished.key, a);
    assert_eq!(finished.state.completed_at(), Some(2.0));
    assert!(s.jobs().is_empty());
    assert!(matches!(
        s.task_finished(a, TaskRef::new(0, 0), 3.0),
        Err(SessionError::UnknownJob(key)) if key == a
    ));
}

#[test]
fn a_lost_task_runs_again() {
    let mut s = session(SessionPolicyKind::Fifo, 1);
    let a = s.add_job(chain("a", 1), 0.0, None);
    let first = s.schedule(&executors(1), 0.0);
    s.task_lost(a, first[0].task).unwrap();
    let again = s.schedule(&executors(1), 1.0);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].task, first[0].task);
    assert!(matches!(
        s.task_lost(a, TaskRef::new(1, 0)),
        Err(SessionError::Task { .. })
    ));
}

#[test]
fn candidates_are_only_stages_that_fit_an_offer() {
    let policy = Scripted {
        limit: 8,
        seen: Vec::new(),
    };
    let mut s = Session::new(Box::new(policy), 8, res("cpus=8"));
    let wide = Arc::new(job(
        "wide",
        "default",
        None,
        vec![stage(0, &[], &[1.0], res("cpus=4"))],
    ));
    s.add_job(wide, 0.0, None);
    s.add_job(chain("narrow", 1), 0.0, None);
    let launches = s.schedule(&executors(2), 0.0);
    assert_eq!(
        launches.len(),
        1,
        "only the narrow job's task fits a one-cpu offer"
    );
    assert_eq!(launches[0].job, 1);
}

#[test]
fn policy_names_round_trip() {
    for kind in SessionPolicyKind::ALL {
        assert_eq!(kind.name().parse::<SessionPolicyKind>(), Ok(kind));
        assert_eq!(kind.build().name(), kind.name());
    }
    assert!("decima?".parse::<SessionPolicyKind>().is_err());
}

#[test]
fn a_sessions_largest_limit_is_the_most_tasks_the_cluster_can_run() {
    let cluster = res("cpus=80,mem_mib=327680");
    // Every task demands cores and memory: cores bind first, 80 one-core tasks.
    let demands = [
        (res("cpus=1,mem_mib=1024"), 10),
        (res("cpus=4,mem_mib=512"), 3),
    ];
    assert_eq!(largest_limit(&cluster, demands), 80);
    // Memory binds: 327680 / 16384 = 20.
    assert_eq!(
        largest_limit(&cluster, [(res("cpus=1,mem_mib=16384"), 5)]),
        20
    );
    // A kind some task does not demand bounds nothing.
    assert_eq!(
        largest_limit(
            &cluster,
            [(res("cpus=2"), 1), (res("mem_mib=1024,cpus=0.5"), 1)]
        ),
        160
    );
    // No kind every task demands: the run's task count; never below 1.
    assert_eq!(
        largest_limit(&cluster, [(res("cpus=1"), 7), (res("mem_mib=1"), 2)]),
        9
    );
    assert_eq!(largest_limit(&cluster, []), 1);
    assert_eq!(largest_limit(&res("cpus=1"), [(res("cpus=4"), 1)]), 1);
    // Hostile capacities saturate instead of overflowing.
    let mut huge = ResourceVec::ZERO;
    huge.0 = [f64::MAX; fullerene_proto::NUM_RESOURCES];
    assert_eq!(
        largest_limit(&huge, [(res("cpus=1,mem_mib=1"), 1)]),
        usize::MAX
    );
    assert_eq!(
        largest_limit(&huge, [(res("cpus=1"), usize::MAX), (res("mem_mib=1"), 1)]),
        usize::MAX
    );
}
