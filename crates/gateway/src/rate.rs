//! A per-principal rate on CheckPolicy: a token bucket per caller, in this process's
//! memory, because what it protects is this gateway's CPU (the proof runs here).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use openshell_store::{Code, Error, Principal, Rate};
use serde_json::json;

/// Callers remembered at once; past it, full buckets are dropped (a full bucket is the
/// same as none), and if none is full the oldest half goes.
const MAX_CALLERS: usize = 10_000;

pub struct Limiter {
    rate: Rate,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl Limiter {
    pub fn new(rate: Rate) -> Limiter {
        Limiter { rate, buckets: Mutex::default() }
    }

    /// Takes one call for `caller`, or refuses LIMIT_REACHED naming the rate and when to retry.
    pub fn take(&self, what: &str, caller: &Principal) -> Result<(), Error> {
        let key = match caller {
            Principal::User { id, .. } => format!("user:{id}"),
            Principal::Sandbox { id, .. } => format!("sandbox:{id}"),
        };
        let capacity = f64::from(self.rate.calls.max(1));
        let per_s = capacity / f64::from(self.rate.period_s.max(1));
        let now = Instant::now();
        let mut map = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_CALLERS && !map.contains_key(&key) {
            map.retain(|_, (t, at)| *t + now.duration_since(*at).as_secs_f64() * per_s < capacity);
            if map.len() >= MAX_CALLERS {
                let mut ages: Vec<Instant> = map.values().map(|(_, at)| *at).collect();
                ages.sort_unstable();
                let cut = ages[ages.len() / 2];
                map.retain(|_, (_, at)| *at > cut);
            }
        }
        let (tokens, at) = map.entry(key).or_insert((capacity, now));
        let available = (*tokens + now.duration_since(*at).as_secs_f64() * per_s).min(capacity);
        if available < 1.0 {
            let retry_after_ms = ((1.0 - available) / per_s * 1000.0).ceil() as u64;
            return Err(Error::new(
                Code::LimitReached,
                format!("{what} rate of {} per caller reached; retry after {retry_after_ms} ms", self.rate),
            )
            .with_details(json!({"limit": "check_policy_rate", "rate": self.rate.to_string(),
                                 "retry_after_ms": retry_after_ms})));
        }
        *tokens = available - 1.0;
        *at = now;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use openshell_store::{Principal, Rate};

    #[test]
    fn a_caller_past_its_rate_is_refused_and_others_are_not() {
        let l = super::Limiter::new(Rate { calls: 3, period_s: 60 });
        let alice = Principal::User { id: 1, name: "alice".into(), admin: false };
        let bob = Principal::User { id: 2, name: "bob".into(), admin: false };
        for _ in 0..3 {
            l.take("check_policy", &alice).unwrap();
        }
        let e = l.take("check_policy", &alice).unwrap_err();
        assert_eq!(e.code, openshell_store::Code::LimitReached);
        assert_eq!(e.details["rate"], "3/min");
        let wait = e.details["retry_after_ms"].as_u64().unwrap();
        assert!((1..=20_000).contains(&wait), "one call refills in 20 s: {wait}");
        l.take("check_policy", &bob).unwrap();
    }
}
