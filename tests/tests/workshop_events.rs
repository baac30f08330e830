//! A publish, a discard and a restore each reach `ATELIER_WORKSHOP_EVENTS` as an event of their
//! own kind (`published`, `discarded`, `checkpoint_restored`), on their own subject, with the
//! checkpoints and file counts a follower needs (real nats-server, coordinator and an office
//! worker; the draft is written by `atelier run`, no model).

use std::time::Duration;

use anyhow::Context;
use atelier_messages::workshop::{StateChange, SystemEvent, WorkshopEvent, WorkshopEventKind};
use atelier_messages::{ErrorCode, subjects};
use atelier_tests::{Cluster, Stored, stored_messages};

/// q3 with plan.csv published and a draft that adds notes.md (two files, one changed).
fn workbench_with_a_draft() -> anyhow::Result<Cluster> {
    let cluster = Cluster::start_with(&["office"])?;
    cluster.workbench_with_launch_plan("q3", "plan.csv")?;
    let args = r#"{"path": "notes.md", "content": "North leads.\n"}"#;
    cluster.cli_ok(&["run", "q3", "write_text_file", "--args", args, "--wait"])?;
    Ok(cluster)
}

/// q3's workshop events once one of `kind` and the revision recorded after it are stored.
async fn events_through(
    cluster: &Cluster,
    kind: WorkshopEventKind,
) -> anyhow::Result<Vec<Stored<WorkshopEvent>>> {
    let client = async_nats::connect(&cluster.nats.url).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let events: Vec<Stored<WorkshopEvent>> = stored_messages(
            &client,
            subjects::workshop::EVENTS_STREAM,
            subjects::workshop::workbench_events("q3"),
        )
        .await?;
        let told = events
            .iter()
            .position(|event| event.payload.kind == kind)
            .is_some_and(|at| at + 1 < events.len());
        if told {
            return Ok(events);
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "no {} event in {:#?}",
            kind.as_str(),
            events.iter().map(|e| e.payload.kind).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The one event of `kind`, checked to be on its own subject, to carry the conversation message
/// that records it (told by no `message_added` besides), and to be followed by the draft's
/// revision at that message; its message's system event and its change.
fn the_one(
    events: &[Stored<WorkshopEvent>],
    kind: WorkshopEventKind,
) -> anyhow::Result<(SystemEvent, StateChange)> {
    let of_kind: Vec<usize> = (0..events.len())
        .filter(|at| events[*at].payload.kind == kind)
        .collect();
    anyhow::ensure!(of_kind.len() == 1, "one {kind:?} event: {of_kind:?}");
    let at = of_kind[0];
    let event = &events[at];
    assert_eq!(
        event.subject,
        subjects::workshop::event("q3", kind.as_str())
    );
    let message = event
        .payload
        .message
        .clone()
        .context("the message it records")?;
    let told_again = events.iter().any(|other| {
        other.payload.kind == WorkshopEventKind::MessageAdded
            && other.payload.message.as_ref().map(|m| &m.id) == Some(&message.id)
    });
    assert!(!told_again, "{} is told once, as {kind:?}", message.id);
    let revision = events[at + 1].payload.revision.clone();
    let revision = revision.context("the revision recorded with the message follows")?;
    assert_eq!(revision.message_id, message.id);
    let change = event.payload.change.clone().context("what it changed")?;
    Ok((message.event.context("a system event")?, change))
}

#[tokio::test(flavor = "multi_thread")]
async fn publishing_a_draft_emits_published_with_the_checkpoint_of_the_replaced_state()
-> anyhow::Result<()> {
    let cluster = workbench_with_a_draft()?;
    cluster.cli_ok(&["draft", "publish", "q3"])?;

    let events = events_through(&cluster, WorkshopEventKind::Published).await?;
    let (recorded, change) = the_one(&events, WorkshopEventKind::Published)?;
    assert_eq!(
        recorded,
        SystemEvent::DraftPublished {
            checkpoint_id: "1".into()
        }
    );
    assert_eq!(
        change,
        StateChange {
            checkpoint_id: Some("1".into()),
            safety_checkpoint_id: None,
            files: 2,
            files_changed: 1,
        }
    );
    let after = events.last().and_then(|e| e.payload.revision.clone());
    assert_eq!(after.map(|r| (r.has_draft, r.files)), Some((false, 0)));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn discarding_a_draft_emits_discarded_with_the_files_it_threw_away() -> anyhow::Result<()> {
    let cluster = workbench_with_a_draft()?;
    cluster.cli_ok(&["draft", "discard", "q3"])?;

    let events = events_through(&cluster, WorkshopEventKind::Discarded).await?;
    let (recorded, change) = the_one(&events, WorkshopEventKind::Discarded)?;
    assert_eq!(recorded, SystemEvent::DraftDiscarded);
    assert_eq!(
        change,
        StateChange {
            checkpoint_id: None,
            safety_checkpoint_id: None,
            files: 2,
            files_changed: 1,
        }
    );
    let draft = cluster.cli(&["wb", "ls", "q3", "--draft"])?;
    assert!(draft.failed_with(ErrorCode::NoDraft.as_str()));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn restoring_a_checkpoint_emits_checkpoint_restored_with_both_checkpoints()
-> anyhow::Result<()> {
    let cluster = workbench_with_a_draft()?;
    cluster.cli_ok(&["draft", "publish", "q3"])?;
    // Checkpoint 1 is plan.csv alone, from before the publish; restoring it takes notes.md out
    // of the published files, and the replaced state becomes checkpoint 2.
    cluster.cli_ok(&["restore", "q3", "1"])?;

    let events = events_through(&cluster, WorkshopEventKind::CheckpointRestored).await?;
    let (recorded, change) = the_one(&events, WorkshopEventKind::CheckpointRestored)?;
    assert_eq!(
        recorded,
        SystemEvent::CheckpointRestored {
            checkpoint_id: "1".into(),
            safety_checkpoint_id: "2".into()
        }
    );
    assert_eq!(
        change,
        StateChange {
            checkpoint_id: Some("1".into()),
            safety_checkpoint_id: Some("2".into()),
            files: 1,
            files_changed: 1,
        }
    );
    Ok(())
}
