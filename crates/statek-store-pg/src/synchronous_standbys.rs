//! `synchronous_standby_names` as PostgreSQL reads it: which standbys a
//! commit waits for, and how they are chosen (priority or quorum). The
//! durability check reads it to judge a standby that a commit does not
//! wait for right now (`sync_state = potential`) and to state the
//! condition a failover must meet.
//!
//! The grammar is PostgreSQL's (`syncrep_gram.y`, `syncrep_scanner.l`):
//!
//! ```text
//! standby_config: standby_list               -- FIRST 1 (standby_list)
//!               | NUM '(' standby_list ')'   -- FIRST NUM (...)
//!               | ANY NUM '(' standby_list ')'
//!               | FIRST NUM '(' standby_list ')'
//! standby_list:   standby_name [',' standby_name]...
//! standby_name:   NAME | NUM | "quoted name" | *
//! ```
//!
//! `ANY` and `FIRST` are keywords in any case; a name that spells one must
//! be quoted. The number must be at least 1.

use std::fmt;

/// The standbys every commit waits for, as `synchronous_standby_names`
/// configures them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SynchronousStandbys {
    /// Empty: commits wait for no standby.
    None,
    /// Priority (`FIRST n (...)`, `n (...)`, or a bare list meaning
    /// `FIRST 1`): each commit waits for the first `count` connected
    /// standbys of the list (`sync_state = sync`); the others listed are
    /// `potential` and have not necessarily flushed an acknowledged commit.
    First {
        /// `n`, at least 1.
        count: u32,
        /// The listed names, in priority order (`*` matches any standby).
        names: Vec<String>,
    },
    /// Quorum (`ANY n (...)`): each commit waits for any `count` of the
    /// listed standbys (`sync_state = quorum`), not always the same ones.
    Any {
        /// `n`, at least 1.
        count: u32,
        /// The listed names (`*` matches any standby).
        names: Vec<String>,
    },
}

impl SynchronousStandbys {
    /// Parses a value as the server reports it (`SHOW
    /// synchronous_standby_names`). `None` when PostgreSQL would not
    /// accept it (a server never reports such a value).
    pub fn parse(text: &str) -> Option<SynchronousStandbys> {
        if text.is_empty() {
            return Some(SynchronousStandbys::None);
        }
        let tokens = tokens(text)?;
        let (first, count, list) = match tokens.as_slice() {
            [Token::Any, Token::Num(n), Token::Open, list @ .., Token::Close] => {
                (false, n.as_str(), list)
            }
            [Token::First, Token::Num(n), Token::Open, list @ .., Token::Close]
            | [Token::Num(n), Token::Open, list @ .., Token::Close] => (true, n.as_str(), list),
            list => (true, "1", list),
        };
        let count: u32 = count.parse().ok().filter(|&n| n >= 1)?;
        let names = names(list)?;
        Some(if first {
            SynchronousStandbys::First { count, names }
        } else {
            SynchronousStandbys::Any { count, names }
        })
    }

    /// The listed names (none when empty).
    pub fn names(&self) -> &[String] {
        match self {
            SynchronousStandbys::None => &[],
            SynchronousStandbys::First { names, .. } | SynchronousStandbys::Any { names, .. } => {
                names
            }
        }
    }
}

impl fmt::Display for SynchronousStandbys {
    /// `none`, `FIRST 1 (standby1, standby2)` or `ANY 1 (standby1,
    /// standby2)`, names as listed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (method, count) = match self {
            SynchronousStandbys::None => return f.write_str("none"),
            SynchronousStandbys::First { count, .. } => ("FIRST", count),
            SynchronousStandbys::Any { count, .. } => ("ANY", count),
        };
        write!(f, "{method} {count} ({})", self.names().join(", "))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Any,
    First,
    /// Digits, kept as text: a standby may be named `1`.
    Num(String),
    Name(String),
    Comma,
    Open,
    Close,
}

fn ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

fn ident_cont(b: u8) -> bool {
    ident_start(b) || b.is_ascii_digit() || b == b'$'
}

/// The scanner: `None` on a byte PostgreSQL's would refuse, or an
/// unterminated quoted name.
fn tokens(text: &str) -> Option<Vec<Token>> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let start = i;
        i += 1;
        match b {
            b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => {}
            b',' => tokens.push(Token::Comma),
            b'(' => tokens.push(Token::Open),
            b')' => tokens.push(Token::Close),
            b'*' => tokens.push(Token::Name("*".to_owned())),
            b'"' => {
                let mut name = Vec::new();
                loop {
                    match (bytes.get(i), bytes.get(i + 1)) {
                        (Some(b'"'), Some(b'"')) => {
                            name.push(b'"');
                            i += 2;
                        }
                        (Some(b'"'), _) => {
                            i += 1;
                            break;
                        }
                        (Some(&c), _) => {
                            name.push(c);
                            i += 1;
                        }
                        (None, _) => return None,
                    }
                }
                tokens.push(Token::Name(String::from_utf8(name).ok()?));
            }
            b if b.is_ascii_digit() => {
                while bytes.get(i).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                }
                tokens.push(Token::Num(text.get(start..i)?.to_owned()));
            }
            b if ident_start(b) => {
                while bytes.get(i).copied().is_some_and(ident_cont) {
                    i += 1;
                }
                let word = text.get(start..i)?;
                tokens.push(if word.eq_ignore_ascii_case("any") {
                    Token::Any
                } else if word.eq_ignore_ascii_case("first") {
                    Token::First
                } else {
                    Token::Name(word.to_owned())
                });
            }
            _ => return None,
        }
    }
    Some(tokens)
}

/// `standby_name [',' standby_name]...`.
fn names(list: &[Token]) -> Option<Vec<String>> {
    let mut names = Vec::new();
    for (index, token) in list.iter().enumerate() {
        match (index % 2, token) {
            (0, Token::Name(name) | Token::Num(name)) => names.push(name.clone()),
            (1, Token::Comma) => {}
            _ => return None,
        }
    }
    // Not empty, and not ending on a comma.
    (list.len() % 2 == 1).then_some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first(count: u32, names: &[&str]) -> Option<SynchronousStandbys> {
        Some(SynchronousStandbys::First {
            count,
            names: names.iter().map(|&n| n.to_owned()).collect(),
        })
    }

    fn any(count: u32, names: &[&str]) -> Option<SynchronousStandbys> {
        Some(SynchronousStandbys::Any {
            count,
            names: names.iter().map(|&n| n.to_owned()).collect(),
        })
    }

    fn check(text: &str, expected: Option<SynchronousStandbys>) {
        assert_eq!(SynchronousStandbys::parse(text), expected, "{text:?}");
    }

    #[test]
    fn parses_as_postgres_does() {
        check("", Some(SynchronousStandbys::None));
        check("standby1", first(1, &["standby1"]));
        check("standby1, standby2", first(1, &["standby1", "standby2"]));
        check(
            "FIRST 1 (standby1, standby2)",
            first(1, &["standby1", "standby2"]),
        );
        check("first 2(s1,s2,s3)", first(2, &["s1", "s2", "s3"]));
        check("2 (s1, s2)", first(2, &["s1", "s2"]));
        check(
            "ANY 1 (standby1, standby2)",
            any(1, &["standby1", "standby2"]),
        );
        check("Any 3 (a,b,c,d)", any(3, &["a", "b", "c", "d"]));
        check("*", first(1, &["*"]));
        check("ANY 1 (*)", any(1, &["*"]));
        check(
            "\"FIRST\", \"a \"\"b\"\"\"",
            first(1, &["FIRST", "a \"b\""]),
        );
        check("1, 2", first(1, &["1", "2"]));
        check("s$1,_s2", first(1, &["s$1", "_s2"]));
        check("firstly", first(1, &["firstly"]));
        check(" \tFIRST\n1 ( s1 ) ", first(1, &["s1"]));
        check("FIRST 01 (s1)", first(1, &["s1"]));
    }

    #[test]
    fn refuses_what_postgres_refuses() {
        check(" ", None);
        check("FIRST 0 (s1)", None);
        check("ANY 0 (s1)", None);
        check("FIRST (s1)", None);
        check("FIRST 1 ()", None);
        check("FIRST 1 (s1,)", None);
        check("FIRST 1 (s1", None);
        check("ANY 1 s1", None);
        check("s1 s2", None);
        check("s1,,s2", None);
        check("first", None);
        check("\"unterminated", None);
        check("s-1", None);
        check("FIRST 99999999999 (s1)", None);
        check("1abc", None);
    }

    #[test]
    fn display() {
        for (text, shown) in [
            ("", "none"),
            ("s1, s2", "FIRST 1 (s1, s2)"),
            ("2 (s1,s2)", "FIRST 2 (s1, s2)"),
            ("any 1 (s1,s2)", "ANY 1 (s1, s2)"),
        ] {
            assert_eq!(
                SynchronousStandbys::parse(text).map(|s| s.to_string()),
                Some(shown.to_owned()),
                "{text:?}"
            );
        }
    }
}
