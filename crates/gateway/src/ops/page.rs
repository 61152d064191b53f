//! Pagination: one page of rows plus the token of the next, the same for every listing.
//!
//! A listing asks the store for one row more than the page holds; if it came, there is a
//! next page, and its token is the key of the page's last row.

use openshell_store::Error;

use crate::input;

/// What a caller asked for: a page size (0 for the default) and the token of a previous page.
pub struct PageRequest {
    pub size: i32,
    pub token: String,
}

/// One page of rows and the token of the next (empty on the last page).
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_token: String,
}

impl<T> Page<T> {
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page { items: self.items.into_iter().map(f).collect(), next_token: self.next_token }
    }
}

impl PageRequest {
    /// The rows to fetch (the page size plus one) and the key the page starts after, read
    /// from the token with `parse`; both refused INVALID_ARGUMENT naming their field.
    pub fn bounds<K>(&self, parse: impl FnOnce(&str) -> Option<K>) -> Result<(i64, Option<K>), Error> {
        let size = input::page_size(self.size)?;
        let after = match self.token.as_str() {
            "" => None,
            t => Some(parse(t).ok_or_else(|| Error::invalid("page_token", "not a token this gateway issued"))?),
        };
        Ok((size + 1, after))
    }

    /// Cuts `rows` (fetched with [`PageRequest::bounds`]) to the page, the next token from
    /// the last row kept by `key`.
    pub fn page<T>(&self, mut rows: Vec<T>, key: impl FnOnce(&T) -> String) -> Page<T> {
        let size = input::page_size(self.size).unwrap_or(100) as usize;
        let next_token = if rows.len() > size {
            rows.truncate(size);
            rows.last().map(key).unwrap_or_default()
        } else {
            String::new()
        };
        Page { items: rows, next_token }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_page_has_a_next_token_and_the_last_does_not() {
        let req = PageRequest { size: 2, token: String::new() };
        let (fetch, after) = req.bounds(|t| t.parse::<i64>().ok()).unwrap();
        assert_eq!((fetch, after), (3, None));
        let p = req.page(vec![5, 4, 3], |r| r.to_string());
        assert_eq!((p.items, p.next_token.as_str()), (vec![5, 4], "4"));
        let p = req.page(vec![2, 1], |r| r.to_string());
        assert_eq!((p.items, p.next_token.as_str()), (vec![2, 1], ""));
    }

    #[test]
    fn bad_tokens_and_sizes_name_their_field() {
        let bad = PageRequest { size: 10, token: "x".into() };
        let e = bad.bounds(|t| t.parse::<i64>().ok()).unwrap_err();
        assert!(e.message.contains("page_token"), "{}", e.message);
        let big = PageRequest { size: 5000, token: String::new() };
        let e = big.bounds(|t| t.parse::<i64>().ok()).unwrap_err();
        assert!(e.message.contains("page_size"), "{}", e.message);
    }
}
