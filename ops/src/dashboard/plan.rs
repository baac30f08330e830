//! The job page's plan: each item's contracts as the checklist lines the plan wrote them in.

use atelier_messages::job::JobView;
use serde::Serialize;

/// One target's contract as the plan writes it (`islands.txt: number from penguins.csv = …`),
/// rendered by the engine's own renderer so the page shows the line the engine checks, not a
/// copy of the format of its own.
#[derive(Debug, Serialize)]
pub struct ContractLine {
    /// The plan item's index.
    pub item: u32,
    /// The target's workbench path.
    pub path: String,
    /// The checklist line, without its bullet.
    pub line: String,
}

/// Every contract of the job's plan, item by item.
pub fn contract_lines(view: &JobView) -> Vec<ContractLine> {
    view.items
        .iter()
        .flat_map(|item| {
            item.contracts.iter().map(|contract| ContractLine {
                item: item.index,
                path: contract.path.clone(),
                line: atelier_agents::contract::render(contract),
            })
        })
        .collect()
}
