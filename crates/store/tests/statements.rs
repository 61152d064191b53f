//! Every statement the store sends (its registry, crates/store/src/queries.rs) fits the schema
//! as it is: prepared against a freshly migrated database, each takes as many parameters as
//! the store binds, each of a type the bound Rust type accepts, and returns the columns the
//! store reads, by name and in order, each of a type the Rust type it is read as accepts. A
//! signature or a result changed in sql/ without the store fails here, not at a call.

mod common;

use openshell_store::queries::{ALL, Query};

/// What is wrong with one statement, or nothing.
async fn problems(sql: &tokio_postgres::Client, q: &Query) -> Vec<String> {
    let stmt = match sql.prepare(q.sql).await {
        Ok(s) => s,
        Err(e) => return vec![format!("{}: does not prepare: {e}", q.name)],
    };
    let mut out = Vec::new();
    if stmt.params().len() != q.params.len() {
        out.push(format!(
            "{}: takes {} parameters {:?}, the store binds {} {:?}",
            q.name,
            stmt.params().len(),
            stmt.params().iter().map(|t| t.name()).collect::<Vec<_>>(),
            q.params.len(),
            q.params
        ));
    }
    for (i, (ty, rust)) in stmt.params().iter().zip(q.params).enumerate() {
        if !(rust.accepts)(ty) {
            out.push(format!("{}: ${} is {}, the store binds {}", q.name, i + 1, ty.name(), rust.name));
        }
    }
    if q.columns.is_empty() {
        return out;
    }
    let have: Vec<(&str, &str)> = stmt.columns().iter().map(|c| (c.name(), c.type_().name())).collect();
    let want: Vec<&str> = q.columns.iter().map(|(name, _)| *name).collect();
    if have.iter().map(|(n, _)| *n).collect::<Vec<_>>() != want {
        out.push(format!("{}: returns the columns {have:?}, the store reads {want:?}", q.name));
        return out;
    }
    for (c, (name, rust)) in stmt.columns().iter().zip(q.columns) {
        if !(rust.accepts)(c.type_()) {
            out.push(format!("{}: column {name} is {}, the store reads it as {}", q.name, c.type_().name(), rust.name));
        }
    }
    out
}

#[tokio::test]
async fn every_statement_prepares_with_the_types_the_store_binds_and_reads() {
    let d = common::db(1).await;
    let mut wrong = Vec::new();
    for q in ALL {
        wrong.extend(problems(&d.sql, q).await);
    }
    assert!(wrong.is_empty(), "{} statements disagree with the schema:\n{}", wrong.len(), wrong.join("\n"));
    // Each is registered once, under its own name.
    let mut names: Vec<&str> = ALL.iter().map(|q| q.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), ALL.len(), "a name registered twice");
}

#[tokio::test]
async fn a_statement_of_other_types_than_the_schema_is_found() {
    use openshell_store::queries::Rust;
    use postgres_types::{FromSql, ToSql};
    let d = common::db(1).await;
    // live_children returns an integer cast to bigint: read as text it is wrong, and a
    // statement that binds one parameter too few or of another type is too.
    let read_as_text = Query {
        name: "read_as_text",
        sql: "SELECT live_children(p_id => $1)::bigint",
        params: &[Rust { name: "Uuid", accepts: <uuid::Uuid as ToSql>::accepts }],
        columns: &[("live_children", Rust { name: "String", accepts: <String as FromSql<'static>>::accepts })],
    };
    let bound_as_text = Query {
        params: &[Rust { name: "String", accepts: <String as ToSql>::accepts }],
        columns: &[("live_children", Rust { name: "i64", accepts: <i64 as FromSql<'static>>::accepts })],
        ..read_as_text
    };
    let too_few = Query { params: &[], ..bound_as_text };
    let misnamed = Query {
        columns: &[("children", Rust { name: "i64", accepts: <i64 as FromSql<'static>>::accepts })],
        ..read_as_text
    };
    for q in [read_as_text, bound_as_text, too_few, misnamed] {
        assert_eq!(problems(&d.sql, &q).await.len(), 1, "{q:?}");
    }
}
