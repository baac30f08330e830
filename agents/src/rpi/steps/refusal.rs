//! Why a compact item's call is not run: the checks on what a small model writes, in order.
//!
//! A write to a file the turn did not offer, a query filtering on values nothing showed, an
//! example's placeholder copied or a new placeholder made up, a paragraph added again, a shown
//! row copied whole, the task restated as the content, a form the request or the item's
//! contract states broken, numbers nothing showed. The model is told why, as a failed tool's
//! result; after a copied row or made-up numbers its next turns read again.
//!
//! One check holds for every model ([`repeats_error`]): a line repeating an error an earlier
//! call got is no content.
//!
//! The plan's contract for the written file is checked when the item ends, against its source
//! when it has one, and that check is authoritative: a file whose contract has a source is not
//! refused for numbers nothing showed (the model may compute a mean itself), nor a `table` or
//! `list` for copying rows (the user asked for them).

use atelier_messages::contract::{Contract, Holds};

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
    /// The texts the request quotes.
    pub(in crate::rpi) quoted: &'a [String],
    /// The item's contracts (none outside Implement).
    pub(in crate::rpi) contracts: &'a [Contract],
}

impl Shown<'_> {
    /// The path of the file `call` writes and the item's contracts for it (none when it has
    /// none).
    fn contracts_of(&self, call: &ToolCall) -> Option<(String, Vec<&Contract>)> {
        let path = crate::contract::clean_path(&grounding::written_path(call)?);
        let contracts: Vec<&Contract> = self
            .contracts
            .iter()
            .filter(|contract| contract.path == path)
            .collect();
        (!contracts.is_empty()).then_some((path, contracts))
    }
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
    let written = shown.contracts_of(call);
    let contracts = written
        .as_ref()
        .map_or(&[][..], |(_, contracts)| &contracts[..]);
    let rows_asked = contracts
        .iter()
        .any(|c| matches!(c.holds, Holds::Table | Holds::List));
    if let Some(row) = grounding::copied_row(call, shown.results).filter(|_| !rows_asked) {
        return Some(Refusal {
            told: grounding::copied_row_refusal(&row),
            back_to_reading: true,
        });
    }
    if grounding::restates(call, shown.task, shown.quoted) {
        return Some(told(grounding::restated_refusal()));
    }
    let rules = match &written {
        Some((path, _)) => {
            form::with_contracts(shown.form, shown.contracts, std::slice::from_ref(path))
        }
        None => shown.form.to_vec(),
    };
    let broken = grounding::text_content(call)
        .filter(|_| !rules.is_empty())
        .and_then(|text| form::broken(&rules, &text, &grounding::shown_values(shown.results)));
    if let Some(why) = broken {
        return Some(told(not_written(format!("not written: {why}"))));
    }
    if contracts.iter().any(|contract| contract.source.is_some()) {
        return None;
    }
    let made_up = grounding::made_up_numbers(call, shown.facts, shown.results);
    (!made_up.is_empty()).then(|| Refusal {
        told: grounding::refusal(&made_up),
        back_to_reading: true,
    })
}

/// The fewest words a written line shares, in a row, with an error the loop was shown for
/// the line to count as repeating it.
const ERROR_WORDS: usize = 4;

/// Why a write is refused whatever the model: a line of its content repeats an error an
/// earlier call of the loop got (`errors`, as shown) — a failed query's message written as
/// the answer. A failed call gives no value to write. Delimited rows (a column list an error
/// names) are left to the contract's check.
pub(in crate::rpi) fn repeats_error(call: &ToolCall, errors: &[String]) -> Option<Refusal> {
    if errors.is_empty() {
        return None;
    }
    let content = grounding::text_content(call)?;
    let errors: Vec<String> = errors.iter().map(|error| words(error)).collect();
    let repeated = content.lines().map(str::trim).find(|line| {
        let prose = line.split_whitespace().count() >= ERROR_WORDS
            && line.matches(',').count() <= 1
            && !line.contains('\t');
        let line_words = words(line);
        prose && errors.iter().any(|error| error.contains(&line_words))
    })?;
    Some(Refusal {
        told: not_written(format!(
            "not written: the line {repeated:?} repeats the error of an earlier call; a call \
             that failed gives no value to write: correct the call (its error says how) and \
             write what its result gives"
        )),
        back_to_reading: true,
    })
}

/// `text` as lowercase words between single spaces, padded with one on each side (escapes of
/// a shown JSON string undone).
fn words(text: &str) -> String {
    let text = text.replace("\\n", " ").replace("\\t", " ").to_lowercase();
    let words: Vec<&str> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .collect();
    format!(" {} ", words.join(" "))
}

#[cfg(test)]
mod tests {
    use atelier_messages::contract::Source;

    use super::*;

    fn write(path: &str, content: &str) -> ToolCall {
        ToolCall {
            id: "call_t1".into(),
            name: "write_text_file".into(),
            arguments: serde_json::json!({"path": path, "content": content}).to_string(),
        }
    }

    fn refused(
        call: &ToolCall,
        request: &str,
        results: &[String],
        contracts: &[Contract],
    ) -> Option<String> {
        let form = form::rules(request);
        let quoted = crate::request::quoted_texts(request);
        let shown = Shown {
            offered: &[],
            facts: &[request],
            results,
            task: &[request, "Do plan item 1: the target"],
            form: &form,
            quoted: &quoted,
            contracts,
        };
        of(call, &shown).map(|refusal| refusal.told)
    }

    #[test]
    fn a_failed_calls_error_is_no_content() {
        // As a small model wrote them after its query failed.
        let errors = vec![
            r#"{"error":{"code":"SQL_ERROR","message":"The query failed: syntax error at or near \"EUR\"\nLINE 1: SELECT IMPORTE EUR FROM data\n               ^"}}"#.to_string(),
        ];
        for content in [
            "SELECT IMPORTE EUR FROM data\n               ^",
            "The query failed: syntax error at or near \"EUR\"",
        ] {
            let refusal = repeats_error(&write("pago.txt", content), &errors);
            assert!(
                refusal.is_some_and(|refusal| refusal.told.contains("repeats the error")),
                "{content}"
            );
        }
        for content in ["863.41", "IMPORTE EUR", "data, LINE, SELECT, EUR, FROM"] {
            assert!(
                repeats_error(&write("pago.txt", content), &errors).is_none(),
                "{content}"
            );
        }
        assert!(repeats_error(&write("pago.txt", "SELECT IMPORTE EUR FROM data"), &[]).is_none());
    }

    #[test]
    fn the_quoted_sentence_asked_for_is_written() {
        let sentence = "Revenue grew by 15% and three major releases shipped.";
        let request = format!("Write \"{sentence}\" into notes.txt");
        assert_eq!(
            refused(&write("notes.txt", sentence), &request, &[], &[]),
            None
        );
    }

    #[test]
    fn a_contract_checked_at_the_items_end_stands_in_for_the_write_time_guesses() {
        let request =
            "Quelle est la longueur moyenne du bec dans penguins.csv ? Mets-la dans moyenne.txt.";
        // As a small model read it: the count of rows, then wrote the mean it computed.
        let counted = vec![
            r#"{"columns":["count_star()"],"row_count":1,"rows":[[344]],"total_row_count":1}"#
                .to_string(),
        ];
        let mean = write("moyenne.txt", "43.92");
        let made_up = refused(&mean, request, &counted, &[]);
        assert!(made_up.is_some_and(|why| why.contains("holds 43.92")));
        let mut sourced = Contract::new("moyenne.txt", Holds::Number);
        sourced.source = Some(Source {
            path: "penguins.csv".into(),
            query: "SELECT avg(bill_length_mm) FROM data".into(),
        });
        let contracts = [sourced.clone()];
        assert_eq!(refused(&mean, request, &counted, &contracts), None);
        // The number contract still holds the text to a number alone, in any language.
        let worded = refused(
            &write("moyenne.txt", "La moyenne est 43.92"),
            request,
            &counted,
            &contracts,
        );
        assert!(worded.is_some_and(|why| why.contains("just the number")));
        // A contract without a source checks the kind only: numbers are still grounded.
        let unsourced = [Contract::new("moyenne.txt", Holds::Number)];
        assert!(refused(&mean, request, &counted, &unsourced).is_some());
        // Another file than the contract's is checked as before.
        assert!(refused(&write("autre.txt", "43.92"), request, &counted, &contracts).is_some());
    }

    #[test]
    fn rows_a_table_contract_asks_for_are_no_copied_row() {
        let request = "Copy the Adelie rows of penguins.csv into adelie.csv";
        let rows = vec![r#"{"columns":["species","island","bill_length_mm"],"rows":[["Adelie","Torgersen",39.1],["Adelie","Dream",39.5]],"has_more":false}"#.to_string()];
        let copy = write(
            "adelie.csv",
            "species,island,bill_length_mm\nAdelie,Torgersen,39.1\nAdelie,Dream,39.5\n",
        );
        let copied = refused(&copy, request, &rows, &[]);
        assert!(copied.is_some_and(|why| why.contains("copies a whole row")));
        let mut table = Contract::new("adelie.csv", Holds::Table);
        table.columns = vec!["species".into(), "island".into(), "bill_length_mm".into()];
        assert_eq!(refused(&copy, request, &rows, &[table]), None);
    }
}
