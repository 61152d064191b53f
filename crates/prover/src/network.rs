//! The network section: is there a request (program, host, port, method, path, or raw
//! traffic) that some candidate endpoint allows and no boundary endpoint does? Endpoints
//! that single boundary endpoints cover part by part are settled without z3
//! ([`crate::cover`]), and so are most that only a union of them covers (its cells); each
//! of the rest goes to one z3 query over the boundary endpoints that can overlap it.

use openshell_policy::glob::Glob;
use openshell_policy::{Endpoint, HttpRequest, NetworkRequest, Policy};
use z3::ast::{Bool, String as Str};
use z3::{Params, SatResult, Solver};

use crate::Budget;
use crate::cover::{Cells, Checker, Ep};
use crate::encode::{Encoder, or};

/// Endpoints that can allow anything: a rule with no program allows nothing.
fn endpoints(p: &Policy) -> impl Iterator<Item = Ep<'_>> {
    p.network_policies
        .iter()
        .filter(|(_, np)| !np.binaries.is_empty())
        .flat_map(|(_, np)| np.endpoints.iter().map(move |ep| Ep { rule: np, ep }))
}

/// How [`find_excess`] decides: the solver-free paths, then z3 for what they leave; or,
/// for the differential tests, one of them alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Solve {
    FastFirst,
    /// Every endpoint by z3.
    Z3Only,
    /// The solver-free paths alone: what they leave is an error naming [`NEEDS_Z3`].
    FastOnly,
}

/// The reason [`Solve::FastOnly`] gives for what only z3 could decide.
pub const NEEDS_Z3: &str = "left to z3";

/// Returns a request the candidate allows and the boundary does not, if any.
pub fn find_excess(
    boundary: &Policy,
    candidate: &Policy,
    budget: &Budget,
    solve_by: Solve,
) -> Result<Option<NetworkRequest>, String> {
    let bounds: Vec<Ep> = endpoints(boundary).collect();
    let mut checker = Checker::new(&bounds, budget);
    let timed_out = || Err(budget.reason());
    let mut open: Vec<Ep> = Vec::new();
    for c in endpoints(candidate) {
        if budget.spent() {
            return timed_out();
        }
        if solve_by == Solve::Z3Only || !checker.covered(&c) {
            open.push(c);
        }
    }
    if solve_by != Solve::Z3Only {
        // A concrete request built from the globs often shows the excess at once.
        for c in &open {
            if budget.spent() {
                return timed_out();
            }
            if let Some(req) = checker.witness(c, boundary, candidate) {
                return Ok(Some(req));
            }
        }
        // Then the union of boundary endpoints, cell by cell.
        let mut undecided = Vec::new();
        for c in open {
            if budget.spent() {
                return timed_out();
            }
            match checker.cells(&c, boundary, candidate) {
                Cells::Covered => {}
                Cells::Excess(req) => return Ok(Some(req)),
                Cells::Undecided => undecided.push(c),
            }
        }
        open = undecided;
    }
    if open.is_empty() {
        return Ok(None);
    }
    if solve_by == Solve::FastOnly {
        return Err(format!("{} endpoint(s) {NEEDS_Z3}", open.len()));
    }
    // Only now a z3 context: checks the fast path settles never pay for one.
    let mut cfg = z3::Config::new();
    cfg.set_model_generation(true);
    z3::with_z3_config(&cfg, || interruptible(budget, || solve(&bounds, &open, budget)))
}

/// Runs `f` (z3 work on this thread's context) while a watcher interrupts z3 if the budget
/// is cancelled; z3's own `timeout` parameter covers the deadline.
fn interruptible<T>(budget: &Budget, f: impl FnOnce() -> T) -> T {
    let ctx = z3::Context::thread_local();
    let handle = ctx.handle();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if budget.cancelled() {
                    handle.interrupt();
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        });
        let out = f();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        out
    })
}

/// One z3 query per open candidate endpoint, on one solver with push/pop.
fn solve(bounds: &[Ep], open: &[Ep], budget: &Budget) -> Result<Option<NetworkRequest>, String> {
    let mut enc = Encoder::new();
    let solver = Solver::new();
    solver.assert(enc.domain());
    let allowed_by = |enc: &mut Encoder, eps: &[&Ep]| {
        let parts: Vec<Bool> = eps.iter().map(|e| Bool::and(&[&enc.binaries(e.rule), &enc.endpoint(e.ep)])).collect();
        or(&parts)
    };
    // One small query per open candidate endpoint, against only the boundary endpoints that
    // can share a host and port with it: far cheaper for z3 than one query over everything.
    for c in open {
        let remaining = budget.remaining();
        if remaining.is_zero() {
            return Err(budget.reason());
        }
        let mut params = Params::new();
        params.set_u32("timeout", remaining.as_millis().clamp(1, u128::from(u32::MAX)) as u32);
        solver.set_params(&params);
        let relevant: Vec<&Ep> = bounds.iter().filter(|b| may_overlap(b.ep, c.ep)).collect();
        let cand = allowed_by(&mut enc, &[c]);
        let bound = allowed_by(&mut enc, &relevant);
        solver.push();
        solver.assert(cand);
        solver.assert(bound.not());
        let found = model_request(&solver, &enc);
        solver.pop(1);
        if let Some(req) = found? {
            return Ok(Some(req));
        }
    }
    Ok(None)
}

/// The request in the solver's model, `None` when unsatisfiable.
fn model_request(solver: &Solver, enc: &Encoder) -> Result<Option<NetworkRequest>, String> {
    match solver.check() {
        SatResult::Unsat => Ok(None),
        SatResult::Unknown => Err(format!(
            "z3 gave no answer for the network section: {}",
            solver.get_reason_unknown().unwrap_or_else(|| "unknown".into())
        )),
        SatResult::Sat => {
            let model = solver.get_model().ok_or_else(|| "z3 returned no model".to_string())?;
            let s = |v: &Str| model.eval(v, true).and_then(|x| x.as_string()).map(|x| unescape(&x)).unwrap_or_default();
            let r = &enc.req;
            let port =
                model.eval(&r.port, true).and_then(|p| p.as_u64()).and_then(|p| u16::try_from(p).ok()).unwrap_or(0);
            let raw = model.eval(&r.raw, true).and_then(|b| b.as_bool()).unwrap_or(false);
            Ok(Some(NetworkRequest {
                program: s(&r.program),
                ancestors: vec![],
                host: s(&r.host),
                port,
                http: (!raw).then(|| HttpRequest { method: s(&r.method), path: s(&r.path), ..Default::default() }),
                addr: None,
            }))
        }
    }
}

/// z3 prints characters outside printable ASCII as `\u{…}`; our domains hold none, but
/// decode anyway so a surprise shows up as a failed replay, not a wrong string.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("\\u{") {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 3..];
        match tail
            .find('}')
            .and_then(|j| u32::from_str_radix(&tail[..j], 16).ok().and_then(char::from_u32).map(|c| (c, j)))
        {
            Some((c, j)) => {
                out.push(c);
                rest = &tail[j + 1..];
            }
            None => {
                out.push_str("\\u{");
                rest = tail;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Whether two endpoints can match a common host and port.
fn may_overlap(a: &Endpoint, b: &Endpoint) -> bool {
    a.ports.iter().any(|p| b.ports.contains(p)) && hosts_may_overlap(&a.host, &b.host)
}

/// Whether two host globs can match a common host (`false` only when they cannot).
/// Wildcard hosts always end in two literal labels, so differing last labels rule out any
/// overlap.
pub fn hosts_may_overlap(a: &str, b: &str) -> bool {
    let literal = |h: &str| !h.contains('*');
    match (literal(a), literal(b)) {
        (true, true) => a == b,
        (true, false) => Glob::host(b).is_ok_and(|g| g.matches(a)),
        (false, true) => Glob::host(a).is_ok_and(|g| g.matches(b)),
        (false, false) => {
            fn tail(h: &str) -> Vec<&str> {
                h.rsplitn(3, '.').take(2).collect()
            }
            tail(a) == tail(b)
        }
    }
}
