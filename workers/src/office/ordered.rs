//! Operations applied in order, for every format's editor: a failure names its operation.

use atelier_messages::ErrorBody;
use serde_json::Value;

/// Applies `ops` to `document` in order with `apply_one`; a failure names its operation's index.
pub(crate) fn apply_in_order<D, Op>(
    document: &mut D,
    ops: &[Op],
    mut apply_one: impl FnMut(&mut D, &Op) -> Result<Value, ErrorBody>,
) -> Result<Vec<Value>, ErrorBody> {
    ops.iter()
        .enumerate()
        .map(|(n, op)| {
            apply_one(document, op)
                .map_err(|e| ErrorBody::new(e.code, format!("operation {n}: {}", e.message)))
        })
        .collect()
}
