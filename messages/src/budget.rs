//! What model calls cost and what a job or batch may spend: [`Usd`] amounts, a profile's
//! [`Prices`], a [`Budget`] and what was [`Spent`].
//!
//! Dollars are kept as whole millionths so that sums over thousands of calls are exact and
//! views compare equal; on the wire an amount is a plain number of dollars. A price is in
//! dollars per million tokens, so a call's cost in millionths of a dollar is simply its tokens
//! times its price in dollars.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{ErrorBody, ErrorCode};

/// The most dollars any budget or price may name (more is a typing mistake).
pub const MAX_USD: f64 = 1_000_000.0;
/// The most tokens any budget may name.
pub const MAX_BUDGET_TOKENS: u64 = 1_000_000_000_000;

const MICROS_PER_USD: f64 = 1_000_000.0;

/// An amount of US dollars, exact to a millionth; a number of dollars on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Usd {
    micros: u64,
}

impl Usd {
    pub const ZERO: Usd = Usd { micros: 0 };

    pub fn from_micros(micros: u64) -> Self {
        Self { micros }
    }

    pub fn micros(self) -> u64 {
        self.micros
    }

    pub fn dollars(self) -> f64 {
        self.micros as f64 / MICROS_PER_USD
    }

    /// `dollars` as an amount, or `VALIDATION_FAILED` naming `setting` when it is negative,
    /// not a number or over [`MAX_USD`].
    pub fn parse_dollars(dollars: f64, setting: &str) -> Result<Self, ErrorBody> {
        if !dollars.is_finite() || !(0.0..=MAX_USD).contains(&dollars) {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!("{setting} = {dollars} must be between 0 and {MAX_USD} dollars"),
            ));
        }
        Ok(Self {
            micros: (dollars * MICROS_PER_USD).round() as u64,
        })
    }

    pub fn saturating_add(self, other: Usd) -> Usd {
        Usd::from_micros(self.micros.saturating_add(other.micros))
    }

    pub fn saturating_sub(self, other: Usd) -> Usd {
        Usd::from_micros(self.micros.saturating_sub(other.micros))
    }
}

impl std::fmt::Display for Usd {
    /// `$0.0123`: cents, and more digits for amounts under ten cents.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let digits = if self.micros >= 100_000 { 2 } else { 4 };
        write!(f, "${:.digits$}", self.dollars())
    }
}

impl Serialize for Usd {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(self.dollars())
    }
}

impl<'de> Deserialize<'de> for Usd {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let dollars = f64::deserialize(deserializer)?;
        Usd::parse_dollars(dollars, "an amount")
            .map_err(|error| serde::de::Error::custom(error.message))
    }
}

/// A model profile's prices, in dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prices {
    pub input_usd_per_mtok: Usd,
    pub output_usd_per_mtok: Usd,
}

impl Prices {
    /// What `prompt` tokens in and `completion` tokens out cost.
    pub fn cost(&self, prompt: u64, completion: u64) -> Usd {
        // A price in dollars per million tokens is, per token, that many millionths.
        let micros =
            |tokens: u64, price: Usd| -> u128 { u128::from(tokens) * u128::from(price.micros) };
        let total = (micros(prompt, self.input_usd_per_mtok)
            + micros(completion, self.output_usd_per_mtok))
        .div_ceil(1_000_000);
        Usd::from_micros(u64::try_from(total).unwrap_or(u64::MAX))
    }
}

/// What a job (or all of a batch's targets together) may spend; a limit left out is none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    /// Prompt and reply tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Dollars, at the model profile's prices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd: Option<Usd>,
}

impl Budget {
    /// True when no limit is set.
    pub fn is_none(&self) -> bool {
        self.tokens.is_none() && self.usd.is_none()
    }

    /// Each limit this budget leaves out taken from `fallback`.
    pub fn or(self, fallback: Budget) -> Budget {
        Budget {
            tokens: self.tokens.or(fallback.tokens),
            usd: self.usd.or(fallback.usd),
        }
    }

    /// A budget given as a number of tokens and of dollars, checked: `VALIDATION_FAILED`
    /// naming `{prefix}tokens` or `{prefix}usd` (see [`Budget::validate`]).
    pub fn parse(tokens: Option<u64>, usd: Option<f64>, prefix: &str) -> Result<Budget, ErrorBody> {
        let usd = usd
            .map(|dollars| Usd::parse_dollars(dollars, &format!("{prefix}usd")))
            .transpose()?;
        let budget = Budget { tokens, usd };
        budget.validate(prefix)?;
        Ok(budget)
    }

    /// `VALIDATION_FAILED` naming the setting of a limit that is 0 or absurd (`prefix` is how
    /// the caller spells them: `--budget-` for flags, `budget_` for a request's fields).
    pub fn validate(&self, prefix: &str) -> Result<(), ErrorBody> {
        if let Some(tokens) = self.tokens
            && !(1..=MAX_BUDGET_TOKENS).contains(&tokens)
        {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!("{prefix}tokens {tokens} must be between 1 and {MAX_BUDGET_TOKENS}"),
            ));
        }
        if self.usd == Some(Usd::ZERO) {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!("{prefix}usd 0 would stop before the first model call: give more"),
            ));
        }
        Ok(())
    }

    /// Why `spent` is at or past this budget, if it is (a dollar limit against an unknown cost
    /// is not checked: budgets in dollars are refused where the cost is unknown).
    pub fn reached_by(&self, spent: &Spent) -> Option<String> {
        if let Some(limit) = self.tokens
            && spent.tokens >= limit
        {
            return Some(format!(
                "{} tokens spent, the budget is {limit} tokens",
                spent.tokens
            ));
        }
        if let (Some(limit), Some(cost)) = (self.usd, spent.cost_usd)
            && cost >= limit
        {
            return Some(format!("{cost} spent, the budget is {limit}"));
        }
        None
    }

    /// What is left of this budget after `spent` (a limit reached is left at 0).
    pub fn remaining(&self, spent: &Spent) -> Budget {
        Budget {
            tokens: self.tokens.map(|limit| limit.saturating_sub(spent.tokens)),
            usd: self
                .usd
                .map(|limit| limit.saturating_sub(spent.cost_usd.unwrap_or_default())),
        }
    }
}

/// What model calls spent: tokens, and their cost when the profile has prices (none: unknown,
/// never shown as 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spent {
    pub tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<Usd>,
}

impl Spent {
    /// What `prompt` and `completion` tokens spent at `prices`: unknown cost without prices,
    /// except that no tokens at all cost nothing.
    pub fn of(prompt: u64, completion: u64, prices: Option<Prices>) -> Self {
        let tokens = prompt.saturating_add(completion);
        let cost_usd = match prices {
            Some(prices) => Some(prices.cost(prompt, completion)),
            None => (tokens == 0).then_some(Usd::ZERO),
        };
        Self { tokens, cost_usd }
    }

    /// Both together; the cost is known only when both are (the first spending of a sum starts
    /// from [`Spent::NOTHING`], whose cost is known: 0).
    pub fn plus(self, other: Spent) -> Spent {
        Spent {
            tokens: self.tokens.saturating_add(other.tokens),
            cost_usd: match (self.cost_usd, other.cost_usd) {
                (Some(a), Some(b)) => Some(a.saturating_add(b)),
                _ => None,
            },
        }
    }

    /// Nothing spent yet, at a known cost.
    pub const NOTHING: Spent = Spent {
        tokens: 0,
        cost_usd: Some(Usd::ZERO),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_price_per_million_tokens_costs_millionths_per_token() {
        let prices = Prices {
            input_usd_per_mtok: Usd::parse_dollars(2.5, "p").expect("price"),
            output_usd_per_mtok: Usd::parse_dollars(10.0, "p").expect("price"),
        };
        // 1,000 tokens in at $2.50/Mtok and 200 out at $10/Mtok: $0.0025 + $0.002.
        assert_eq!(prices.cost(1_000, 200), Usd::from_micros(4_500));
        // A part of a millionth is rounded up, never lost.
        assert_eq!(prices.cost(1, 0), Usd::from_micros(3));
        assert_eq!(Usd::from_micros(4_500).to_string(), "$0.0045");
        assert_eq!(Usd::from_micros(1_234_567).to_string(), "$1.23");
    }

    #[test]
    fn amounts_travel_as_dollars_and_bad_ones_are_refused() {
        let budget = Budget {
            tokens: Some(3_000),
            usd: Some(Usd::from_micros(250_000)),
        };
        let json = serde_json::to_string(&budget).expect("json");
        assert_eq!(json, r#"{"tokens":3000,"usd":0.25}"#);
        assert_eq!(serde_json::from_str::<Budget>(&json).expect("back"), budget);
        let packed = rmp_serde::to_vec_named(&budget).expect("msgpack");
        assert_eq!(
            rmp_serde::from_slice::<Budget>(&packed).expect("back"),
            budget
        );
        assert!(serde_json::from_str::<Budget>(r#"{"usd":-1}"#).is_err());
        let code = |budget: Budget| budget.validate("--budget-").map_err(|error| error.code);
        assert_eq!(
            code(Budget {
                tokens: Some(0),
                usd: None
            }),
            Err(ErrorCode::ValidationFailed)
        );
        assert_eq!(
            code(Budget {
                tokens: None,
                usd: Some(Usd::ZERO)
            }),
            Err(ErrorCode::ValidationFailed)
        );
        assert_eq!(
            Usd::parse_dollars(f64::NAN, "budget_usd").map_err(|error| error.code),
            Err(ErrorCode::ValidationFailed)
        );
        assert_eq!(code(budget), Ok(()));
    }

    #[test]
    fn a_budget_is_reached_by_either_limit_and_an_unknown_cost_stays_unknown() {
        let budget = Budget {
            tokens: Some(3_000),
            usd: Some(Usd::from_micros(10_000)),
        };
        let spent = Spent {
            tokens: 2_400,
            cost_usd: Some(Usd::from_micros(9_000)),
        };
        assert_eq!(budget.reached_by(&spent), None);
        let more = spent.plus(Spent {
            tokens: 1_200,
            cost_usd: Some(Usd::from_micros(500)),
        });
        assert!(
            budget
                .reached_by(&more)
                .is_some_and(|why| why.contains("3600 tokens"))
        );
        let remaining = budget.remaining(&spent);
        assert_eq!(remaining.tokens, Some(600));
        assert_eq!(remaining.usd, Some(Usd::from_micros(1_000)));
        let unknown = spent.plus(Spent {
            tokens: 1,
            cost_usd: None,
        });
        assert_eq!(unknown.cost_usd, None);
        assert_eq!(Spent::of(10, 10, None).cost_usd, None);
        assert_eq!(Spent::of(0, 0, None).cost_usd, Some(Usd::ZERO));
    }
}
