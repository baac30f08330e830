//! Drafts, publish and checkpoints, idempotent writes, the workshop conversation (one job at a
//! time, revisions, rewind), and refusals with their codes.
use super::*;
use crate::replication::Checked;
use crate::replication::replica::Replica;
use crate::{JobDefaults, TimeLimits};
use atelier_messages::shard::Mutation;
use atelier_messages::workshop::Regenerate;

/// A replicated store whose changelog is applied to a mirror store as it commits: when a test
/// ends, the mirror must hold exactly what the store holds (docs/adr/0014), so every workload
/// below also checks that the recorded writes reproduce the store.
struct Fixture {
    _dir: tempfile::TempDir,
    store: crate::storage::Store<Workbenches>,
    /// The store itself, read as a replica.
    stored: Replica,
    mirror: Replica,
}

struct MirrorSink {
    mirror: Replica,
    seq: std::sync::atomic::AtomicU64,
}

impl crate::storage::Sink for MirrorSink {
    fn commit(&self, groups: Vec<Vec<Mutation>>) -> Result<(), CoordinatorError> {
        let seq = 1 + self.seq.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mutations = groups.into_iter().flatten().collect();
        self.mirror.apply(seq, &Checked::Mutations(mutations))
    }
}

/// A replica's trees that hold something (but its own bookkeeping).
fn held(replica: &Replica) -> std::collections::BTreeMap<String, Vec<Entry>> {
    let db = replica.db();
    db.tree_names()
        .into_iter()
        .map(|name| String::from_utf8_lossy(&name).to_string())
        .filter(|name| !name.starts_with(crate::replication::RESERVED_TREE_PREFIX))
        .map(|name| {
            let tree = db.open_tree(&name).unwrap_or_else(|e| panic!("{e}"));
            let entries: Vec<Entry> = tree
                .iter()
                .map(|entry| entry.unwrap_or_else(|e| panic!("{e}")))
                .map(|(key, value)| (key.to_vec(), value.to_vec()))
                .collect();
            (name, entries)
        })
        .filter(|(_, entries)| !entries.is_empty())
        .collect()
}

type Entry = (Vec<u8>, Vec<u8>);

impl Drop for Fixture {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        self.store
            .write_here(crate::storage::Durability::Commit, |_| Ok(()))
            .unwrap_or_else(|e| panic!("{e}"));
        let stored = held(&self.stored);
        assert!(!stored.is_empty());
        assert_eq!(
            held(&self.mirror),
            stored,
            "the changelog does not reproduce the store"
        );
    }
}

fn fixture() -> (Fixture, Workbenches) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mirror =
        Replica::open(&dir.path().join("mirror"), 8 << 20).unwrap_or_else(|e| panic!("{e}"));
    let sink = MirrorSink {
        mirror: mirror.clone(),
        seq: Default::default(),
    };
    let db = crate::storage::open_db(&dir.path().join("db")).unwrap_or_else(|e| panic!("{e}"));
    let stored = Replica::from_db(db.clone()).unwrap_or_else(|e| panic!("{e}"));
    let storage = Storage::replicated(db, crate::storage::Log::new(sink));
    let blobs = BlobDir::open(dir.path().join("blobs")).unwrap_or_else(|e| panic!("{e}"));
    let workbenches = Workbenches::new(storage, blobs);
    let fixture = Fixture {
        _dir: dir,
        store: crate::storage::Store::new(workbenches.clone()),
        stored,
        mirror,
    };
    (fixture, workbenches)
}

fn file(path: &str, content: &str) -> FileContent {
    FileContent::inline(path, content.as_bytes().to_vec())
}

fn write(
    wb: &Workbenches,
    workbench: &str,
    call_id: &str,
    files: Vec<FileContent>,
    delete: &[String],
) -> Result<Written, CoordinatorError> {
    let changes = DraftChanges {
        files,
        delete: delete.to_vec(),
    };
    wb.write(workbench, call_id, changes, None)
}

fn code(result: Result<impl std::fmt::Debug, CoordinatorError>) -> Option<ErrorCode> {
    result.err().map(|e| e.to_body().code)
}

#[test]
fn draft_lifecycle_diff_publish_checkpoint() {
    let (_dir, wb) = fixture();
    wb.create("q3").unwrap_or_else(|e| panic!("{e}"));
    wb.add("q3", vec![file("a.csv", "x\n1\n"), file("b.txt", "keep")])
        .unwrap_or_else(|e| panic!("{e}"));
    write(
        &wb,
        "q3",
        "call-1",
        vec![file("a.csv", "x\n2\n"), file("out/c.md", "new")],
        &["b.txt".into()],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let diff = wb.diff("q3").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(diff.added, vec!["out/c.md"]);
    assert_eq!(diff.modified, vec!["a.csv"]);
    assert_eq!(diff.deleted, vec!["b.txt"]);
    let published_before = wb
        .read("q3", "a.csv", View::Published)
        .unwrap_or_else(|e| panic!("{e}"))
        .1;
    assert_eq!(published_before, b"x\n1\n");
    let published = wb.publish("q3").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(published.checkpoint_id, "1");
    assert_eq!(
        wb.read("q3", "a.csv", View::Published)
            .unwrap_or_else(|e| panic!("{e}"))
            .1,
        b"x\n2\n"
    );
    assert_eq!(code(wb.publish("q3")), Some(ErrorCode::NoDraft));
    assert_eq!(
        wb.info("q3")
            .map(|i| (i.file_count, i.has_draft, i.checkpoints))
            .ok(),
        Some((2, false, 1))
    );
}

#[test]
fn writes_are_idempotent_per_call_id() {
    let (_dir, wb) = fixture();
    wb.create("w").unwrap_or_else(|e| panic!("{e}"));
    let first =
        write(&wb, "w", "c1", vec![file("a.txt", "one")], &[]).unwrap_or_else(|e| panic!("{e}"));
    let again =
        write(&wb, "w", "c1", vec![file("a.txt", "two")], &[]).unwrap_or_else(|e| panic!("{e}"));
    assert!(!first.replayed);
    assert!(again.replayed);
    assert_eq!(again.files, first.files);
    assert_eq!(
        wb.read("w", "a.txt", View::Draft)
            .unwrap_or_else(|e| panic!("{e}"))
            .1,
        b"one"
    );
}

#[test]
fn an_applied_call_keeps_its_answer_for_replays() {
    let (_dir, wb) = fixture();
    wb.create("w").unwrap_or_else(|e| panic!("{e}"));
    wb.add("w", vec![file("gone.txt", "x")])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        wb.applied("w", "del")
            .unwrap_or_else(|e| panic!("{e}"))
            .is_none()
    );
    let answer = serde_json::json!({"path": "gone.txt", "deleted": true});
    let changes = DraftChanges {
        files: Vec::new(),
        delete: vec!["gone.txt".into()],
    };
    wb.write("w", "del", changes, Some(answer.clone()))
        .unwrap_or_else(|e| panic!("{e}"));
    let applied = wb
        .applied("w", "del")
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("the call is recorded"));
    assert_eq!(applied.output, Some(answer));
    assert!(applied.written.replayed);
    assert_eq!(applied.written.deleted, vec!["gone.txt"]);
}

#[test]
fn a_name_is_a_file_or_a_folder_never_both() {
    let (_dir, wb) = fixture();
    wb.create("w").unwrap_or_else(|e| panic!("{e}"));
    wb.add("w", vec![file("a", "x")])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        code(wb.add("w", vec![file("b", "y"), file("a/b", "y")])),
        Some(ErrorCode::ValidationFailed)
    );
    assert_eq!(
        code(write(&wb, "w", "c1", vec![file("a/c.txt", "x")], &[])),
        Some(ErrorCode::ValidationFailed)
    );
    // Moving the file out of the way in the same call is fine.
    write(&wb, "w", "c2", vec![file("a/c.txt", "x")], &["a".into()])
        .unwrap_or_else(|e| panic!("{e}"));
    let listing = wb
        .list_files("w", View::Draft)
        .unwrap_or_else(|e| panic!("{e}"));
    let paths: Vec<_> = listing.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, vec!["a/c.txt"]);
}

#[test]
fn bad_names_paths_and_states_get_codes() {
    let (_dir, wb) = fixture();
    assert_eq!(code(wb.create("../x")), Some(ErrorCode::ValidationFailed));
    assert_eq!(
        code(wb.list_files("nope", View::Published)),
        Some(ErrorCode::NotFound)
    );
    wb.create("w").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code(wb.create("w")), Some(ErrorCode::ValidationFailed));
    assert_eq!(
        code(write(&wb, "w", "c", vec![file("../evil", "x")], &[])),
        Some(ErrorCode::SandboxViolation)
    );
    assert_eq!(code(wb.discard("w")), Some(ErrorCode::NoDraft));
    assert_eq!(
        code(wb.list_files("w", View::Draft)),
        Some(ErrorCode::NoDraft)
    );
    write(&wb, "w", "c", vec![file("a", "x")], &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        code(wb.add("w", vec![file("b", "y")])),
        Some(ErrorCode::DraftExists)
    );
    assert_eq!(
        code(write(&wb, "w", "d", vec![], &["missing".into()])),
        Some(ErrorCode::NotFound)
    );
    assert_eq!(
        code(write(&wb, "w", "e", vec![], &[])),
        Some(ErrorCode::ValidationFailed)
    );
    wb.discard("w").unwrap_or_else(|e| panic!("{e}"));
    assert!(
        wb.list_files("w", View::Current)
            .map(|l| l.files.is_empty())
            .unwrap_or(false)
    );
}

#[test]
fn small_blobs_live_in_the_database_and_their_files_are_only_a_cache() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let storage = Storage::open(&dir.path().join("db")).unwrap_or_else(|e| panic!("{e}"));
    let blob_root = dir.path().join("blobs");
    let blobs = BlobDir::open(blob_root.clone()).unwrap_or_else(|e| panic!("{e}"));
    let wb = Workbenches::new(storage, blobs);
    wb.create("w").unwrap_or_else(|e| panic!("{e}"));
    let large = "x".repeat(INLINE_BLOB_BYTES + 1);
    let listing = wb
        .add(
            "w",
            vec![file("small.txt", "tiny"), file("large.txt", &large)],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let digest = |path: &str| {
        listing
            .files
            .iter()
            .find(|entry| entry.path == path)
            .map(|entry| entry.digest.clone())
            .unwrap_or_else(|| panic!("{path} listed"))
    };
    let cache_file = |digest: &str| blob_root.join(&digest[..2]).join(digest);
    // The small blob's file is a cache: gone, the content still reads from the database.
    let small = digest("small.txt");
    std::fs::remove_file(cache_file(&small)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(wb.blob(&small).unwrap_or_else(|e| panic!("{e}")), b"tiny");
    // The large one is a durable file of its own.
    let large_digest = digest("large.txt");
    assert_eq!(
        std::fs::read(cache_file(&large_digest))
            .unwrap_or_default()
            .len(),
        INLINE_BLOB_BYTES + 1
    );
    assert_eq!(
        wb.blob(&large_digest)
            .unwrap_or_else(|e| panic!("{e}"))
            .len(),
        INLINE_BLOB_BYTES + 1
    );
}

fn submit(
    job_id: &str,
    model: Option<&str>,
    continue_draft: bool,
) -> atelier_messages::job::JobSubmit {
    atelier_messages::job::JobSubmit {
        v: 1,
        job_id: job_id.into(),
        workbench: "q3".into(),
        message: format!("message of {job_id}"),
        model: model.map(str::to_string),
        submitted_at_ms: 0,
        auto_approve: false,
        continue_draft,
        approvals: None,
        workflow: None,
        batch_id: None,
        time_limit_secs: None,
        priority: None,
        budget: Default::default(),
    }
}

fn refusal_code(accepted: Accepted) -> Option<ErrorCode> {
    match accepted {
        Accepted::Refused(record) => record.error.map(|e| e.code),
        _ => None,
    }
}

fn answered(wb: &Workbenches, job_id: &str) {
    let end = TurnEnd {
        job_id: job_id.into(),
        state: atelier_messages::job::JobState::Succeeded,
        answer: Some(format!("answer of {job_id}")),
        error: None,
        model: "replay:x".into(),
    };
    wb.finish_turn("q3", &end).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_job_gets_the_operators_time_limit_or_its_own_within_the_maximum() {
    let (_dir, wb) = fixture();
    wb.create("q3").unwrap_or_else(|e| panic!("{e}"));
    let defaults = JobDefaults {
        model: None,
        time_limits: TimeLimits {
            default_secs: 120,
            max_secs: 600,
        },
        spending: Default::default(),
    };
    let mut asked = submit("j1", None, false);
    asked.time_limit_secs = Some(601);
    let refused = wb.accept_message(&asked, &defaults);
    assert_eq!(
        refused.ok().and_then(refusal_code),
        Some(ErrorCode::ValidationFailed)
    );
    asked.job_id = "j2".into();
    asked.time_limit_secs = Some(30);
    match wb.accept_message(&asked, &defaults) {
        Ok(Accepted::New(record)) => assert_eq!(record.time_limit_secs, 30),
        other => panic!("{other:?}"),
    }
    answered(&wb, "j2");
    match wb.accept_message(&submit("j3", None, true), &defaults) {
        Ok(Accepted::New(record)) => assert_eq!(record.time_limit_secs, 120),
        other => panic!("{other:?}"),
    }
}

#[test]
fn one_job_at_a_time_then_draft_exists_unless_continuing() {
    let (_dir, wb) = fixture();
    wb.create("q3").unwrap_or_else(|e| panic!("{e}"));
    let first = wb.accept_message(
        &submit("j1", Some("replay:a"), false),
        &JobDefaults::default(),
    );
    assert!(matches!(first, Ok(Accepted::New(_))));
    let busy = wb.accept_message(&submit("j2", None, true), &JobDefaults::default());
    assert_eq!(
        busy.ok().and_then(refusal_code),
        Some(ErrorCode::WorkbenchBusy)
    );
    // A redelivered id changes nothing.
    let again = wb.accept_message(
        &submit("j1", Some("replay:a"), false),
        &JobDefaults::default(),
    );
    assert!(matches!(again, Ok(Accepted::Existing(_))));
    write(&wb, "q3", "c1", vec![file("out.md", "x")], &[]).unwrap_or_else(|e| panic!("{e}"));
    answered(&wb, "j1");
    let drafted = wb.accept_message(&submit("j3", None, false), &JobDefaults::default());
    assert_eq!(
        drafted.ok().and_then(refusal_code),
        Some(ErrorCode::DraftExists)
    );
    assert_eq!(
        code(wb.check_message("q3", false)),
        Some(ErrorCode::DraftExists)
    );
    assert!(wb.check_message("q3", true).is_ok());
    // A message asked with another model than the one before records the switch.
    let continued = wb.accept_message(
        &submit("j4", Some("replay:b"), true),
        &JobDefaults::default(),
    );
    assert!(matches!(continued, Ok(Accepted::New(_))));
    let messages = wb.messages("q3").unwrap_or_else(|e| panic!("{e}"));
    let ids: Vec<_> = messages.iter().map(|m| (m.id.as_str(), m.role)).collect();
    use atelier_messages::workshop::{Role, SystemEvent};
    assert_eq!(
        ids,
        [
            ("m1", Role::User),
            ("m2", Role::Assistant),
            ("m3", Role::System),
            ("m4", Role::User)
        ]
    );
    assert_eq!(
        messages[2].event,
        Some(SystemEvent::ModelSwitched {
            model: "replay:b".into(),
            message_only: true
        })
    );
    assert_eq!(
        code(wb.check_message("nope", false)),
        Some(ErrorCode::NotFound)
    );
    // Asked only if idle, a busy workbench records nothing: the same id is new once it is idle.
    let waiting = wb.accept_message_if_idle(&submit("j5", None, true), &JobDefaults::default());
    assert_eq!(code(waiting), Some(ErrorCode::WorkbenchBusy));
    answered(&wb, "j4");
    let later = wb.accept_message_if_idle(&submit("j5", None, true), &JobDefaults::default());
    assert!(matches!(later, Ok(Accepted::New(_))), "{later:?}");
}

#[test]
fn rewind_restores_revisions_until_a_publish_forgets_them() {
    let (_dir, wb) = fixture();
    wb.create("q3").unwrap_or_else(|e| panic!("{e}"));
    wb.accept_message(&submit("j1", None, false), &JobDefaults::default())
        .unwrap_or_else(|e| panic!("{e}"));
    write(&wb, "q3", "c1", vec![file("a.md", "1")], &[]).unwrap_or_else(|e| panic!("{e}"));
    answered(&wb, "j1");
    wb.accept_message(&submit("j2", None, true), &JobDefaults::default())
        .unwrap_or_else(|e| panic!("{e}"));
    write(&wb, "q3", "c2", vec![file("b.md", "2")], &[]).unwrap_or_else(|e| panic!("{e}"));
    answered(&wb, "j2");
    // m3 is j2's message: the draft then held a.md only.
    let rewound = wb
        .rewind("q3", "m3", RewindDraft::Restore)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rewound.removed, ["m4"]);
    let paths: Vec<_> = wb
        .list_files("q3", View::Draft)
        .unwrap_or_else(|e| panic!("{e}"))
        .files
        .into_iter()
        .map(|f| f.path)
        .collect();
    assert_eq!(paths, ["a.md"]);
    wb.publish("q3").unwrap_or_else(|e| panic!("{e}"));
    write(&wb, "q3", "c3", vec![file("c.md", "3")], &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        code(wb.rewind("q3", "m2", RewindDraft::Restore)),
        Some(ErrorCode::RevisionPruned)
    );
    let chat_only = wb
        .rewind("q3", "m2", RewindDraft::Keep)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(chat_only.has_draft, "the draft stays as it is");
    // Its state at m1 is gone: discard the draft and rewind.
    let discarded = wb
        .rewind("q3", "m1", RewindDraft::DiscardWhenGone)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (discarded.head.as_str(), discarded.has_draft),
        ("m1", false)
    );
    assert_eq!(
        code(wb.rewind("q3", "m999", RewindDraft::Keep)),
        Some(ErrorCode::NotFound)
    );
    assert_eq!(
        code(wb.set_model("q3", "no-such-provider:x")),
        Some(ErrorCode::ProviderNotConfigured)
    );
}

#[test]
fn a_draft_knows_when_and_by_which_message_it_was_started() {
    let (_dir, wb) = fixture();
    let wb = wb.with_stale_draft_after(std::time::Duration::from_secs(3600));
    wb.create("q3").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(wb.info("q3").unwrap_or_else(|e| panic!("{e}")).draft, None);
    let accepted = wb.accept_message(&submit("j1", None, false), &JobDefaults::default());
    assert!(matches!(accepted, Ok(Accepted::New(_))));
    write(&wb, "q3", "c1", vec![file("a.txt", "one")], &[]).unwrap_or_else(|e| panic!("{e}"));
    let origin = wb.info("q3").unwrap_or_else(|e| panic!("{e}")).draft;
    let origin = origin.unwrap_or_else(|| panic!("a draft has an origin"));
    assert_eq!(
        (origin.job_id.as_deref(), origin.message_id.as_deref()),
        (Some("j1"), Some("m1"))
    );
    assert!(!origin.stale);
    // Garbage collection reads the stores around it.
    wb.collect_garbage().unwrap_or_else(|e| panic!("{e}"));
    // A later write keeps the draft's start.
    write(&wb, "q3", "c2", vec![file("b.txt", "two")], &[]).unwrap_or_else(|e| panic!("{e}"));
    let listed = wb
        .list_files("q3", View::Draft)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        listed.draft.map(|o| o.started_at_ms),
        Some(origin.started_at_ms)
    );
    answered(&wb, "j1");
    // Past the limit it is pointed out.
    let strict = wb.clone().with_stale_draft_after(std::time::Duration::ZERO);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let history = strict.history("q3").unwrap_or_else(|e| panic!("{e}"));
    assert!(history.draft.is_some_and(|o| o.stale));
    // Gone with the draft; a write outside any job starts one of its own.
    wb.discard("q3").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(wb.info("q3").unwrap_or_else(|e| panic!("{e}")).draft, None);
    write(&wb, "q3", "c3", vec![file("c.txt", "three")], &[]).unwrap_or_else(|e| panic!("{e}"));
    let direct = wb.info("q3").unwrap_or_else(|e| panic!("{e}")).draft;
    assert!(direct.is_some_and(|o| o.job_id.is_none() && o.message_id.is_none()));
}

#[test]
fn regenerate_answers_any_earlier_user_message_after_saying_what_goes() {
    let (_dir, wb) = fixture();
    wb.create("q3").unwrap_or_else(|e| panic!("{e}"));
    for (job, path) in [("j1", "a.md"), ("j2", "b.md")] {
        wb.accept_message(&submit(job, None, true), &JobDefaults::default())
            .unwrap_or_else(|e| panic!("{e}"));
        write(&wb, "q3", job, vec![file(path, job)], &[]).unwrap_or_else(|e| panic!("{e}"));
        answered(&wb, job);
    }
    let request = |from: &str| Regenerate {
        v: 1,
        workbench: "q3".into(),
        from_message_id: Some(from.into()),
        dry_run: true,
        job_id: None,
        model: None,
        auto_approve: false,
    };
    let preview = wb
        .regenerate_preview(&request("m1"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(preview.replaced, ["m2", "m3", "m4"]);
    assert!(preview.dry_run);
    assert_eq!(
        wb.messages("q3").map(|m| m.len()).ok(),
        Some(4),
        "nothing changed"
    );
    assert_eq!(
        code(wb.regenerate_preview(&request("m2"))),
        Some(ErrorCode::ValidationFailed)
    );
    assert_eq!(
        code(wb.regenerate_preview(&request("m9"))),
        Some(ErrorCode::NotFound)
    );
    let (record, regenerated) = wb
        .regenerate(&request("m1"), "j3", &JobDefaults::default())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(regenerated.replaced, ["m2", "m3", "m4"]);
    assert_eq!(record.message, "message of j1");
    let ids: Vec<_> = wb
        .messages("q3")
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(ids, ["m1", "m5"]);
    // The draft is back as it was when m1 was asked: none yet.
    assert_eq!(
        code(wb.list_files("q3", View::Draft)),
        Some(ErrorCode::NoDraft)
    );
}

#[test]
fn references_come_in_digest_order_a_page_at_a_time() {
    let (_dir, wb) = fixture();
    wb.create("w").unwrap_or_else(|e| panic!("{e}"));
    wb.add("w", vec![file("a.txt", "one"), file("b.txt", "two")])
        .unwrap_or_else(|e| panic!("{e}"));
    // A draft revision references the third.
    write(&wb, "w", "c1", vec![file("c.txt", "three")], &[]).unwrap_or_else(|e| panic!("{e}"));
    let mut expected: Vec<String> = ["one", "two", "three"]
        .iter()
        .map(|content| crate::blobs::digest_of(content.as_bytes()))
        .collect();
    expected.sort();

    let (first, more) = wb.references(None, 2).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(first, expected[..2]);
    assert!(more);
    let (second, more) =
        (wb.references(first.last().map(String::as_str), 2)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(second, expected[2..]);
    assert!(!more);
    let (all, more) = wb.references(None, 10).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((all, more), (expected, false));
}

#[test]
fn the_current_files_kept_in_memory_follow_every_write_to_them() {
    let (_dir, wb) = fixture();
    wb.create("kept").unwrap_or_else(|e| panic!("{e}"));
    wb.add("kept", vec![file("a.txt", "a")])
        .unwrap_or_else(|e| panic!("{e}"));
    let paths = |files: &[ManifestEntry]| -> Vec<String> {
        files.iter().map(|file| file.path.clone()).collect()
    };
    let kept = |wb: &Workbenches| wb.kept_current_files("kept").map(|files| paths(&files));
    let read =
        |wb: &Workbenches| paths(&wb.current_files("kept").unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(kept(&wb), None, "nothing was read yet");
    assert_eq!(read(&wb), ["a.txt"]);
    assert_eq!(kept(&wb).as_deref(), Some(&["a.txt".to_string()][..]));

    // A write to another tree (a job's record) leaves the copy current.
    let jobs = wb
        .storage
        .tree(trees::JOBS)
        .unwrap_or_else(|e| panic!("{e}"));
    jobs.insert("job-1", b"record".to_vec())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(kept(&wb).as_deref(), Some(&["a.txt".to_string()][..]));

    // Files added, a tool call's write to the draft, a discard: each is seen at once.
    wb.add("kept", vec![file("b.txt", "b")])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(kept(&wb), None, "a file was added since the copy was read");
    assert_eq!(read(&wb), ["a.txt", "b.txt"]);
    write(
        &wb,
        "kept",
        "call-1",
        vec![file("c.txt", "c")],
        &["a.txt".into()],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(kept(&wb), None, "the draft was written since");
    assert_eq!(read(&wb), ["b.txt", "c.txt"]);
    wb.discard("kept").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(kept(&wb), None, "the draft was discarded since");
    assert_eq!(read(&wb), ["a.txt", "b.txt"]);

    // A workbench that does not exist is never answered from memory.
    assert_eq!(code(wb.current_files("missing")), Some(ErrorCode::NotFound));
    assert_eq!(wb.kept_current_files("missing"), None);
}
