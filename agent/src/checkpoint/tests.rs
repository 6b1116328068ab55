use super::*;
use fullerene_proto::ids::{AgentId, FrameworkId, TaskId, TaskKey};
use fullerene_proto::messages::{StatusUpdate, TaskState};
use fullerene_proto::testkit::sleep_task;

fn update(task: &str, seq: u64) -> Record {
    Record::Update(StatusUpdate {
        task_id: TaskId::from(task),
        framework_id: FrameworkId::from("f"),
        agent_id: AgentId::from("agent-1"),
        state: TaskState::Running,
        seq,
        reason: None,
        message: format!("update {seq} of {task}"),
        timestamp_ms: seq * 10,
    })
}

fn ack(task: &str, seq: u64) -> Record {
    Record::Ack {
        task: TaskKey::new(FrameworkId::from("f"), TaskId::from(task)),
        seq,
    }
}

fn write(dir: &Path, records: &[Record]) {
    let (mut log, recovered) = Checkpoint::open(dir).expect("open");
    assert!(recovered.records.is_empty());
    for record in records {
        log.append(record).expect("append");
    }
    log.sync().expect("sync");
    // Dropped without any clean close, as in a crash after the fsync.
}

#[test]
fn crc_is_the_standard_crc32() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32(b""), 0);
}

#[test]
fn records_survive_a_crash_and_appends_continue() {
    let dir = tempfile::tempdir().expect("tempdir");
    let records = vec![update("a", 1), update("a", 2), ack("a", 1)];
    write(dir.path(), &records);
    let (mut log, recovered) = Checkpoint::open(dir.path()).expect("reopen");
    assert_eq!(recovered.records, records);
    assert_eq!(recovered.torn_tail, None);
    log.append(&update("b", 1)).expect("append");
    log.sync().expect("sync");
    drop(log);
    let (_, recovered) = Checkpoint::open(dir.path()).expect("reopen");
    assert_eq!(recovered.records.len(), 4);
    assert_eq!(recovered.records[3], update("b", 1));
}

#[test]
fn a_torn_last_record_is_dropped_and_the_file_truncated() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), &[update("a", 1), update("a", 2)]);
    let path = dir.path().join(LOG_FILE);
    let good_len = fs::metadata(&path).expect("metadata").len();
    // A crash halfway through the third append.
    let frame = frame(&update("a", 3)).expect("frame");
    let mut file = OpenOptions::new().append(true).open(&path).expect("open");
    file.write_all(&frame[..frame.len() / 2]).expect("write");
    drop(file);

    let (mut log, recovered) = Checkpoint::open(dir.path()).expect("reopen");
    assert_eq!(recovered.records, vec![update("a", 1), update("a", 2)]);
    let torn = recovered.torn_tail.expect("torn tail reported");
    assert_eq!(torn.offset, good_len);
    assert_eq!(torn.bytes, (frame.len() / 2) as u64);
    assert_eq!(fs::metadata(&path).expect("metadata").len(), good_len);
    // The log goes on from the good prefix.
    log.append(&update("a", 3)).expect("append");
    log.sync().expect("sync");
    drop(log);
    let (_, recovered) = Checkpoint::open(dir.path()).expect("reopen");
    assert_eq!(recovered.records.len(), 3);
    assert_eq!(recovered.torn_tail, None);
}

#[test]
fn a_garbled_last_record_and_a_zero_filled_tail_are_torn_tails() {
    for garble in [
        |frame: &mut Vec<u8>| {
            let last = frame.len() - 1;
            frame[last] ^= 0xFF;
        },
        |frame: &mut Vec<u8>| frame.iter_mut().for_each(|b| *b = 0),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), &[update("a", 1)]);
        let path = dir.path().join(LOG_FILE);
        let mut frame = frame(&update("a", 2)).expect("frame");
        garble(&mut frame);
        let mut file = OpenOptions::new().append(true).open(&path).expect("open");
        file.write_all(&frame).expect("write");
        drop(file);
        let (_, recovered) = Checkpoint::open(dir.path()).expect("reopen");
        assert_eq!(recovered.records, vec![update("a", 1)]);
        assert!(recovered.torn_tail.is_some());
    }
}

#[test]
fn damage_before_the_last_record_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        &[update("a", 1), update("a", 2), update("a", 3)],
    );
    let path = dir.path().join(LOG_FILE);
    let mut bytes = fs::read(&path).expect("read");
    let second = MAGIC.len() + frame(&update("a", 1)).expect("frame").len();
    bytes[second + HEADER_LEN + 3] ^= 0x55;
    fs::write(&path, &bytes).expect("write");
    let error = Checkpoint::open(dir.path()).expect_err("damage must be refused");
    assert!(
        matches!(&error, CheckpointError::Damaged { offset, .. } if *offset == second as u64),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("checksum"), "{text}");
    // Nothing was truncated.
    assert_eq!(fs::read(&path).expect("read"), bytes);
}

#[test]
fn a_file_that_is_not_a_checkpoint_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(dir.path().join(LOG_FILE), b"hello world, not a log").expect("write");
    let error = Checkpoint::open(dir.path()).expect_err("refused");
    assert!(
        matches!(error, CheckpointError::NotACheckpoint { .. }),
        "{error:?}"
    );
}

#[test]
fn compaction_keeps_the_live_state_and_drops_acked_history() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, _) = Checkpoint::open(dir.path()).expect("open");
    // Many acked updates of one long-gone task and one live unacked update.
    for seq in 1..=2000 {
        log.append(&update("old", seq)).expect("append");
        log.append(&ack("old", seq)).expect("append");
    }
    log.sync().expect("sync");
    let before = log.len();
    let live = vec![update("live", 1)];
    log.compact(&live).expect("compact");
    assert!(log.len() < before / 100, "{} -> {}", before, log.len());
    log.append(&ack("live", 1)).expect("append");
    log.sync().expect("sync");
    drop(log);
    let (_, recovered) = Checkpoint::open(dir.path()).expect("reopen");
    assert_eq!(recovered.records, vec![update("live", 1), ack("live", 1)]);
}

#[test]
fn should_compact_once_the_log_outgrows_the_live_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, _) = Checkpoint::open(dir.path()).expect("open");
    assert!(!log.should_compact());
    let mut seq = 0;
    while !log.should_compact() {
        seq += 1;
        log.append(&update("t", seq)).expect("append");
        assert!(seq < 100_000, "never asked to compact");
    }
    assert!(log.len() > MIN_COMPACT_BYTES);
    log.compact(&[update("t", seq)]).expect("compact");
    assert!(!log.should_compact());
}

#[test]
fn a_full_disk_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let full = Path::new("/dev/full");
    let file = OpenOptions::new()
        .write(true)
        .open(full)
        .expect("/dev/full");
    let mut log = Checkpoint {
        dir: dir.path().to_path_buf(),
        path: full.to_path_buf(),
        file,
        len: HEADER_LEN as u64,
        unsynced: false,
        base_len: HEADER_LEN as u64,
    };
    let error = log.append(&update("a", 1)).expect_err("no space");
    assert!(
        matches!(error, CheckpointError::DiskFull { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("disk is full"), "{error}");
    assert_eq!(log.len(), HEADER_LEN as u64);
}

/// Writes `records` as a format-1 log (magic `FLRNCKP1`, tasks named by id alone).
fn write_v1(dir: &Path, records: &[RecordV1]) {
    let mut bytes = MAGIC_V1.to_vec();
    for record in records {
        bytes.extend_from_slice(&frame(record).expect("frame"));
    }
    fs::write(dir.join(LOG_FILE), bytes).expect("write");
}

#[test]
fn a_format_1_log_is_read_and_rewritten_in_format_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let launched = |framework: &str, task: &str| RecordV1::Launched {
        framework_id: FrameworkId::from(framework),
        spec: sleep_task(task, 1_000, "cpus=1", 0),
        accepted: true,
    };
    let key = |framework: &str, task: &str| TaskKey::new(framework.into(), task.into());
    write_v1(
        dir.path(),
        &[
            launched("fw-1", "a"),
            RecordV1::Started {
                task_id: "a".into(),
                runtime: Runtime::Sleep { deadline_ms: 5 },
            },
            // Acked and forgotten, then launched again by another framework: later records
            // about `a` are the new task's.
            RecordV1::Ack {
                task_id: "a".into(),
                seq: 2,
            },
            launched("fw-2", "a"),
            RecordV1::KillRequested {
                task_id: "a".into(),
                cause: KillCause::Framework,
                grace_ms: 7,
            },
            // About a task the log never launched: recovery ignores it, so it is dropped.
            RecordV1::Ack {
                task_id: "ghost".into(),
                seq: 1,
            },
        ],
    );
    let expected = vec![
        Record::Launched {
            framework_id: "fw-1".into(),
            spec: sleep_task("a", 1_000, "cpus=1", 0),
            accepted: true,
        },
        Record::Started {
            task: key("fw-1", "a"),
            runtime: Runtime::Sleep { deadline_ms: 5 },
        },
        Record::Ack {
            task: key("fw-1", "a"),
            seq: 2,
        },
        Record::Launched {
            framework_id: "fw-2".into(),
            spec: sleep_task("a", 1_000, "cpus=1", 0),
            accepted: true,
        },
        Record::KillRequested {
            task: key("fw-2", "a"),
            cause: KillCause::Framework,
            grace_ms: 7,
        },
    ];
    let (mut log, recovered) = Checkpoint::open(dir.path()).expect("open a format-1 log");
    assert_eq!(recovered.records, expected);
    let on_disk = fs::read(dir.path().join(LOG_FILE)).expect("read");
    assert_eq!(&on_disk[..MAGIC.len()], MAGIC, "rewritten in format 2");
    log.append(&ack("b", 1)).expect("append");
    log.sync().expect("sync");
    drop(log);
    let (_, recovered) = Checkpoint::open(dir.path()).expect("reopen");
    let mut with_append = expected;
    with_append.push(ack("b", 1));
    assert_eq!(recovered.records, with_append);
}
