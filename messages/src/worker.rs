//! Worker pools as NATS micro services: the service and endpoint names `$SRV` lists them under,
//! and the live numbers a worker adds to its endpoint's `$SRV.STATS` answer.

use serde::{Deserialize, Serialize};

use crate::tool::Pool;

/// The endpoint name inside a pool's service.
pub const TOOL_ENDPOINT: &str = "tools";

/// The NATS micro service name of a pool's workers: `atelier-<pool>`.
pub fn service_name(pool: Pool) -> String {
    format!("atelier-{pool}")
}

/// The pool a service name belongs to (the inverse of [`service_name`]).
pub fn pool_of_service(name: &str) -> Option<Pool> {
    name.strip_prefix("atelier-").and_then(Pool::parse)
}

/// What a worker adds to its endpoint's `$SRV.STATS` (`data`): live numbers the service API
/// does not have. Tool errors are answered in the reply envelope (the format is fixed), so the
/// service's own `num_errors` stays 0; `tool_errors` counts them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerStatsData {
    pub worker: String,
    pub pool: String,
    pub in_flight: u64,
    pub max_concurrency: u64,
    pub tool_errors: u64,
    #[serde(default)]
    pub last_error_code: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_names_map_back_to_pools() {
        for pool in Pool::ALL {
            assert_eq!(pool_of_service(&service_name(pool)), Some(pool));
        }
        assert_eq!(pool_of_service("atelier-nope"), None);
    }
}
