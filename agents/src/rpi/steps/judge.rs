//! What a phase accepts as the final answer of its tool loop, and the verdict on an answer
//! given without tool calls: accept it, tell the model what is missing, or give up.

use crate::rpi::prompts;

/// What a phase accepts as the final answer of its tool loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::rpi) enum Expect {
    /// Research: findings, not an empty reply.
    Findings,
    /// Plan: a checklist, or the no-change marker.
    Checklist,
    /// An Implement item: at least one successful tool call, or a stated reason (no change
    /// needed, or the item failed).
    Work,
}

/// The verdict on an answer without tool calls.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    Accept,
    /// Tell the model this and let it answer again.
    Nudge(String),
    /// A plan said nothing needs to change for a request that asks for an artefact: tell the
    /// model why that was refused and let it answer again (once).
    RefuseNoChange(String),
    /// Give up: the reason.
    Refuse(String),
}

/// How many times a phase tells the model its answer is not acceptable before giving up.
fn nudges_allowed(expect: Expect) -> u32 {
    match expect {
        Expect::Findings | Expect::Work => 1,
        Expect::Checklist => 2,
    }
}

/// What the loop knows when it judges an answer.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Judging<'a> {
    /// The loop's successful tool calls so far.
    pub successful_calls: u32,
    /// How often the model was already told its answer was not acceptable.
    pub nudges: u32,
    /// How often a plan's no-change answer was already refused.
    pub refusals: u32,
    /// Why the request asks for an artefact, when it does ([`crate::request`]).
    pub asks_for: Option<&'a str>,
    /// The files the request names that the workbench does not have.
    pub requested_files: &'a [String],
}

/// Judges an answer given with no tool calls. A plan that answers that nothing needs to
/// change is accepted only with a reason and only for a request that asks for no artefact;
/// for one that does, the model is told why once, then the plan is given up on.
pub(super) fn judge(expect: Expect, answer: &str, judging: Judging<'_>) -> Verdict {
    let Judging {
        successful_calls,
        nudges,
        refusals,
        asks_for,
        requested_files,
    } = judging;
    if expect == Expect::Checklist
        && crate::plan::parse(answer).is_empty()
        && prompts::no_change(answer).is_some()
        && let Some(why) = asks_for
    {
        return if refusals == 0 {
            Verdict::RefuseNoChange(prompts::refuse_no_change_plan(why))
        } else {
            Verdict::Refuse(format!(
                "it answered again that nothing needs to change, but the request asks for an \
                 artefact ({why})"
            ))
        };
    }
    let problem = match expect {
        Expect::Findings if answer.trim().is_empty() => {
            Some(("the research answer was empty", prompts::nudge_empty()))
        }
        Expect::Checklist
            if crate::plan::parse(answer).is_empty() && prompts::no_change(answer).is_none() =>
        {
            Some((
                "the plan is not a checklist of `- [ ] N. label — description` items",
                prompts::nudge_plan(asks_for),
            ))
        }
        // A plan whose targets leave out a file the request names is told so once (a plan
        // naming no target at all is not: the job's own check fails it if the file is never
        // written).
        Expect::Checklist if nudges == 0 => {
            let items = crate::plan::parse(answer);
            let names_targets = items.iter().any(|item| !item.targets.is_empty());
            let unplanned = crate::plan::unplanned(&items, requested_files);
            (names_targets && !unplanned.is_empty()).then(|| {
                (
                    "the plan does not write the files the request names",
                    prompts::nudge_targets(&unplanned),
                )
            })
        }
        Expect::Work
            if successful_calls == 0
                && prompts::no_change(answer).is_none()
                && prompts::item_failure(answer).is_none() =>
        {
            Some((
                "no tool call succeeded and no reason was given that no change is needed",
                prompts::nudge_no_tool_call(asks_for),
            ))
        }
        _ => None,
    };
    match problem {
        None => Verdict::Accept,
        Some((_, nudge)) if nudges < nudges_allowed(expect) => Verdict::Nudge(nudge),
        Some((reason, _)) => Verdict::Refuse(reason.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;

    fn at(successful_calls: u32, nudges: u32) -> Judging<'static> {
        Judging {
            successful_calls,
            nudges,
            ..Judging::default()
        }
    }

    #[test]
    fn a_plan_without_change_is_refused_once_for_a_request_that_asks_for_an_artefact() {
        let why = "it names count.txt, which the workbench does not have";
        let artefact = |refusals| Judging {
            refusals,
            asks_for: Some(why),
            ..Judging::default()
        };
        let answer = "NO_CHANGE_NEEDED: The request is a question the research answers.";
        assert!(matches!(
            judge(Expect::Checklist, answer, artefact(0)),
            Verdict::RefuseNoChange(told) if told.contains(why) && !told.contains("NO_CHANGE")
        ));
        assert!(matches!(
            judge(Expect::Checklist, answer, artefact(1)),
            Verdict::Refuse(reason) if reason.contains(why)
        ));
        // A checklist is a plan, whatever the request.
        assert_eq!(
            judge(
                Expect::Checklist,
                "- [ ] 1. Count — rows → count.txt",
                artefact(0)
            ),
            Verdict::Accept
        );
        // A question's plan may say so, with a reason; the marker alone is not an answer.
        assert_eq!(
            judge(Expect::Checklist, "NO_CHANGE_NEEDED: 344 rows", at(0, 0)),
            Verdict::Accept
        );
        assert!(matches!(
            judge(Expect::Checklist, "NO_CHANGE_NEEDED:", at(0, 0)),
            Verdict::Nudge(_)
        ));
        // The format reminder offers no way out to a request that asks for an artefact.
        assert!(matches!(
            judge(Expect::Checklist, "12345", artefact(0)),
            Verdict::Nudge(told) if !told.contains("NO_CHANGE")
        ));
    }

    #[test]
    fn a_plan_whose_targets_leave_out_the_requested_file_is_told_once() {
        let requested = vec!["count.txt".to_string()];
        let judging = |nudges| Judging {
            nudges,
            asks_for: Some("it names count.txt"),
            requested_files: &requested,
            ..Judging::default()
        };
        let misplaced = "- [ ] 1. Count — the rows → launch_plan.csv";
        assert!(matches!(
            judge(Expect::Checklist, misplaced, judging(0)),
            Verdict::Nudge(told) if told.contains("→ count.txt") && !told.contains("NO_CHANGE")
        ));
        assert_eq!(
            judge(Expect::Checklist, misplaced, judging(1)),
            Verdict::Accept
        );
        // A plan naming no target is left to the job's own check.
        let untargeted = "- [ ] 1. Count — the rows";
        assert_eq!(
            judge(Expect::Checklist, untargeted, judging(0)),
            Verdict::Accept
        );
        let named = "- [ ] 1. Count — the rows → count.txt";
        assert_eq!(judge(Expect::Checklist, named, judging(0)), Verdict::Accept);
    }

    #[test]
    fn answers_are_judged_by_what_their_phase_needs() {
        use Verdict::{Accept, Nudge, Refuse};
        // Research: an empty reply is nudged once, then given up on.
        assert!(matches!(
            judge(Expect::Findings, "  \n", at(0, 0)),
            Nudge(_)
        ));
        assert!(matches!(judge(Expect::Findings, "", at(0, 1)), Refuse(_)));
        assert_eq!(judge(Expect::Findings, "Five rows.", at(0, 0)), Accept);
        // Plan: garbled text (as a small model wrote it) is told the format twice.
        let garbled = "41 N. Count the number of rows in penguins.csv";
        assert!(
            matches!(judge(Expect::Checklist, garbled, at(0, 0)), Nudge(n) if n.contains("- [ ] N. label"))
        );
        assert!(matches!(
            judge(Expect::Checklist, garbled, at(0, 1)),
            Nudge(_)
        ));
        assert!(
            matches!(judge(Expect::Checklist, garbled, at(0, 2)), Refuse(r) if r.contains("checklist"))
        );
        assert_eq!(
            judge(Expect::Checklist, "- [ ] 1. Count — rows", at(0, 0)),
            Accept
        );
        assert_eq!(
            judge(Expect::Checklist, "NO_CHANGE_NEEDED: a question", at(0, 0)),
            Accept
        );
        // An item: a claim without a successful call is nudged once, then refused; a stated
        // reason or a failure marker is an answer.
        assert!(
            matches!(judge(Expect::Work, "Item 1 complete.", at(0, 0)), Nudge(n) if n.contains("no successful tool call"))
        );
        assert!(matches!(
            judge(Expect::Work, "Item 1 complete.", at(0, 1)),
            Refuse(_)
        ));
        assert_eq!(judge(Expect::Work, "Item 1 complete.", at(1, 0)), Accept);
        assert_eq!(
            judge(Expect::Work, "NO_CHANGE_NEEDED: already sorted", at(0, 0)),
            Accept
        );
        assert_eq!(
            judge(Expect::Work, "ITEM_FAILED: no such column", at(0, 0)),
            Accept
        );
    }

    #[test]
    fn captured_plans_of_a_small_model_are_judged_as_plans() {
        use crate::captured::captured;
        use crate::text_tools::{Reading, read_reply};
        let answer =
            |name: &str| match read_reply(&captured(name).reply().text, &catalog::plan_tools()) {
                Reading::Answer(answer) => answer,
                other => panic!("{other:?}"),
            };
        // `12345` is told the format twice, then refused (PLAN_INVALID).
        let number = answer("constrained-plan-number.json");
        assert!(matches!(
            judge(Expect::Checklist, &number, at(0, 0)),
            Verdict::Nudge(_)
        ));
        assert!(matches!(
            judge(Expect::Checklist, &number, at(0, 1)),
            Verdict::Nudge(_)
        ));
        assert!(matches!(
            judge(Expect::Checklist, &number, at(0, 2)),
            Verdict::Refuse(_)
        ));
        // A numbered step is a plan; whether it works is up to its item's tool calls.
        let copied = answer("constrained-plan-copied-example.json");
        assert_eq!(judge(Expect::Checklist, &copied, at(0, 0)), Verdict::Accept);
        // Research notes that are a made-up object are still findings (not empty).
        let made_up = captured("text-research-bare-object.json").reply().text;
        assert_eq!(judge(Expect::Findings, &made_up, at(0, 0)), Verdict::Accept);
        // The same text as an item's answer, with no successful call, is not work.
        assert!(matches!(
            judge(Expect::Work, &made_up, at(0, 0)),
            Verdict::Nudge(_)
        ));
        assert!(matches!(
            judge(Expect::Work, &made_up, at(0, 1)),
            Verdict::Refuse(_)
        ));
    }
}
