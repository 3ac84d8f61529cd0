//! S-expressions read with an explicit stack of bounded depth ([`sexps`]), each knowing its line.

use super::property::{VnnlibError, MAX_DEPTH};

/// An s-expression with the line it starts on.
#[derive(Debug, Clone)]
pub(super) enum Sexp {
    Atom(String, usize),
    List(Vec<Sexp>, usize),
}

impl Sexp {
    pub(super) fn line(&self) -> usize {
        match self {
            Sexp::Atom(_, l) | Sexp::List(_, l) => *l,
        }
    }
}

pub(super) fn err<T>(line: usize, message: impl Into<String>) -> Result<T, VnnlibError> {
    Err(VnnlibError {
        line,
        message: message.into(),
    })
}

/// The top-level s-expressions of `text` (comments `;` to the end of the line dropped), read with
/// an explicit stack no deeper than [`MAX_DEPTH`].
pub(super) fn sexps(text: &str) -> Result<Vec<Sexp>, VnnlibError> {
    let mut stack: Vec<(Vec<Sexp>, usize)> = Vec::new();
    let mut top = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let code = raw.split(';').next().unwrap_or("");
        let spaced = code.replace('(', " ( ").replace(')', " ) ");
        for token in spaced.split_whitespace() {
            match token {
                "(" => {
                    if stack.len() >= MAX_DEPTH {
                        return err(line, format!("nesting deeper than {MAX_DEPTH} levels"));
                    }
                    stack.push((Vec::new(), line));
                }
                ")" => {
                    let Some((items, start)) = stack.pop() else {
                        return err(line, "`)` without a matching `(`");
                    };
                    let list = Sexp::List(items, start);
                    match stack.last_mut() {
                        Some((parent, _)) => parent.push(list),
                        None => top.push(list),
                    }
                }
                atom => {
                    let a = Sexp::Atom(atom.to_string(), line);
                    match stack.last_mut() {
                        Some((parent, _)) => parent.push(a),
                        None => return err(line, format!("`{atom}` outside parentheses")),
                    }
                }
            }
        }
    }
    if let Some((_, start)) = stack.last() {
        return err(*start, "`(` not closed before the end of the file");
    }
    Ok(top)
}
