//! Context items of a workbench: its situation text and its skills, stored in the workshop
//! tree (`<wb>\0ctx\0<name>`, each change with its `context_changed` event) and injected into
//! every model call of its jobs. Items are bounded
//! when they are added, so they are always given in full.

use atelier_messages::path::normalize;
use atelier_messages::workshop::{
    ContextChange, ContextItem, ContextKind, WorkshopEvent, WorkshopEventKind,
};
use atelier_messages::{ErrorBody, ErrorCode};

use super::tx::{event, put};
use super::{Workbenches, key};
use crate::error::CoordinatorError;
use crate::storage::txn::abort;
use crate::storage::{self, trees};

/// The most text one context item may hold.
pub const MAX_ITEM_BYTES: usize = 64 * 1024;
/// The most context items a workbench may have.
pub const MAX_ITEMS: usize = 16;
/// The name the situation is stored under.
pub const SITUATION: &str = "situation";

fn item_key(workbench: &str, name: &str) -> Vec<u8> {
    key(workbench, &format!("ctx\u{0}{name}"))
}

fn invalid(message: String) -> CoordinatorError {
    ErrorBody::new(ErrorCode::ValidationFailed, message).into()
}

/// Checks an item and gives it its stored form (the situation is always named `situation`).
fn checked(mut item: ContextItem) -> Result<ContextItem, CoordinatorError> {
    if item.kind == ContextKind::Situation {
        item.name = SITUATION.to_string();
        if item.files.len() != 1 {
            return Err(invalid("the situation is one text file".into()));
        }
    }
    let name_ok = !item.name.is_empty()
        && item.name.len() <= 64
        && item
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !name_ok {
        return Err(invalid(format!(
            "context item name {:?} must be 1-64 characters of A-Z a-z 0-9 . _ -",
            item.name
        )));
    }
    if item.files.is_empty() {
        return Err(invalid("a context item needs at least one file".into()));
    }
    let bytes: usize = item.files.iter().map(|f| f.text.len()).sum();
    if bytes > MAX_ITEM_BYTES {
        return Err(invalid(format!(
            "context item `{}` holds {bytes} bytes; the limit is {MAX_ITEM_BYTES}",
            item.name
        )));
    }
    for file in &mut item.files {
        file.path = normalize(&file.path)?;
    }
    Ok(item)
}

fn context_changed(workbench: &str, name: &str, removed: bool) -> WorkshopEvent {
    WorkshopEvent {
        context: Some(ContextChange {
            name: name.to_string(),
            removed,
        }),
        ..event(workbench, WorkshopEventKind::ContextChanged)
    }
}

impl Workbenches {
    /// Adds a context item, replacing one of the same name.
    pub fn add_context_item(
        &self,
        workbench: &str,
        item: ContextItem,
    ) -> Result<ContextItem, CoordinatorError> {
        self.record(workbench)?;
        let item = checked(item)?;
        let existing = self.context_items(workbench)?;
        let replaces = existing.iter().any(|other| other.name == item.name);
        if !replaces && existing.len() >= MAX_ITEMS {
            return Err(invalid(format!(
                "workbench `{workbench}` has {MAX_ITEMS} context items; remove one first"
            )));
        }
        self.transact(|tx| {
            put(tx.workshop, &item_key(workbench, &item.name), &item)?;
            tx.emit(&context_changed(workbench, &item.name, false))
        })?;
        Ok(item)
    }

    /// The workbench's context items: the situation first, then skills by name.
    pub fn context_items(&self, workbench: &str) -> Result<Vec<ContextItem>, CoordinatorError> {
        self.record(workbench)?;
        let tree = self.storage.tree(trees::WORKSHOP)?;
        let mut items: Vec<ContextItem> = tree
            .scan_prefix(key(workbench, "ctx\u{0}"))
            .map(|entry| storage::decode(&entry?.1))
            .collect::<Result<_, _>>()?;
        items.sort_by_key(|item| (item.kind != ContextKind::Situation, item.name.clone()));
        Ok(items)
    }

    pub fn remove_context_item(&self, workbench: &str, name: &str) -> Result<(), CoordinatorError> {
        self.record(workbench)?;
        self.transact(|tx| {
            if tx.workshop.remove(item_key(workbench, name))?.is_none() {
                return Err(abort(
                    ErrorBody::new(
                        ErrorCode::NotFound,
                        format!("no context item `{name}` in `{workbench}`; list them with `atelier context ls {workbench}`"),
                    )
                    .into(),
                ));
            }
            tx.emit(&context_changed(workbench, name, true))
        })?;
        Ok(())
    }
}
