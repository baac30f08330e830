//! Why a compact item's call is not run: the checks on what a small model writes, in order.
//!
//! A write to a file the turn did not offer, a query filtering on values nothing showed, an
//! example's placeholder copied or a new placeholder made up, a paragraph added again, a shown
//! row copied whole, the task restated as the content, a form the request states broken,
//! numbers nothing showed. The model is told why, as a failed tool's result; after a copied row
//! or made-up numbers its next turns read again.

use crate::catalog::ToolSpec;
use crate::provider::ToolCall;

use super::super::filters;
use super::super::form::{self, FormRule};
use super::super::grounding::{self, not_written};
use super::super::quotes;
use super::stage;

/// A call the engine did not run: what the model is told, and whether the item goes back to
/// reading (to compute or pick out what it wrote wrong).
pub(in crate::rpi) struct Refusal {
    pub(in crate::rpi) told: String,
    pub(in crate::rpi) back_to_reading: bool,
}

/// What the model was shown and asked, for checking its call.
pub(in crate::rpi) struct Shown<'a> {
    /// The tools the turn offered, as offered.
    pub(in crate::rpi) offered: &'a [ToolSpec],
    /// The request and the maps, as shown.
    pub(in crate::rpi) facts: &'a [&'a str],
    /// The results of the tools the loop ran.
    pub(in crate::rpi) results: &'a [String],
    /// The request and the item's task.
    pub(in crate::rpi) task: &'a [&'a str],
    /// The forms the request states.
    pub(in crate::rpi) form: &'a [FormRule],
}

/// Why `call` is not run, if it is not.
pub(in crate::rpi) fn of(call: &ToolCall, shown: &Shown<'_>) -> Option<Refusal> {
    let told = |told: String| Refusal {
        told,
        back_to_reading: false,
    };
    if let Some(why) = stage::outside_offered_paths(call, shown.offered) {
        return Some(told(why));
    }
    let copied = grounding::copied_placeholders(call);
    if !copied.is_empty() {
        return Some(told(grounding::placeholder_refusal(&copied)));
    }
    let filtered = filters::invented_filter_values(call, shown.facts, shown.results);
    if !filtered.is_empty() {
        return Some(told(filters::refusal(&filtered)));
    }
    let invented = grounding::invented_placeholders(call, shown.facts, shown.results);
    if !invented.is_empty() {
        return Some(told(grounding::invented_refusal(&invented)));
    }
    if let Some(why) = quotes::added_again(call, shown.results) {
        return Some(told(why));
    }
    if let Some(row) = grounding::copied_row(call, shown.results) {
        return Some(Refusal {
            told: grounding::copied_row_refusal(&row),
            back_to_reading: true,
        });
    }
    if grounding::restates(call, shown.task) {
        return Some(told(grounding::restated_refusal()));
    }
    let broken = grounding::text_content(call)
        .filter(|_| !shown.form.is_empty())
        .and_then(|text| form::broken(shown.form, &text, &grounding::shown_values(shown.results)));
    if let Some(why) = broken {
        return Some(told(not_written(format!("not written: {why}"))));
    }
    let made_up = grounding::made_up_numbers(call, shown.facts, shown.results);
    (!made_up.is_empty()).then(|| Refusal {
        told: grounding::refusal(&made_up),
        back_to_reading: true,
    })
}
