//! Unit tests of the VNN-LIB reader: what is read exactly, and what is refused with its line.

use super::assertions::parse_decimal_signed;
use super::*;

const HEADER: &str = "(declare-const X_0 Real)\n(declare-const X_1 Real)\n(declare-const Y_0 Real)\n(declare-const Y_1 Real)\n(declare-const Y_2 Real)\n";

fn q(s: &str) -> Rational {
    parse_decimal_signed(s).unwrap()
}

#[test]
fn a_box_and_an_or_of_ands_are_read_exactly() {
    let text = format!(
        "{HEADER}; comment (ignored)\n(assert (<= X_0 0.5))\n(assert (>= X_0 -0.25))\n\
         (assert (<= X_1 1e-3))\n(assert (>= X_1 0))\n\
         (assert (or (and (>= Y_1 Y_0) (<= Y_2 3.99)) (and (<= (+ Y_0 (* 2 Y_1)) (- Y_2 1)))))\n"
    );
    let p = parse(&text).unwrap();
    assert_eq!((p.inputs, p.outputs), (2, 3));
    assert_eq!(p.boxes.len(), 1);
    assert_eq!(p.boxes[0].lower, vec![q("-0.25"), q("0")]);
    assert_eq!(p.boxes[0].upper, vec![q("0.5"), q("0.001")]);
    assert_eq!(p.disjuncts.len(), 2);
    // Y_1 >= Y_0  ->  Y_0 - Y_1 <= 0
    let first = &p.disjuncts[0][0];
    assert_eq!(first.coef, vec![(0, q("1")), (1, q("-1"))]);
    assert_eq!(first.constant, q("0"));
    assert_eq!(first.line, 11);
    // Y_2 <= 3.99
    assert_eq!(p.disjuncts[0][1].coef, vec![(2, q("1"))]);
    assert_eq!(p.disjuncts[0][1].constant, q("-3.99"));
    // Y_0 + 2 Y_1 <= Y_2 - 1  ->  Y_0 + 2 Y_1 - Y_2 + 1 <= 0
    let third = &p.disjuncts[1][0];
    assert_eq!(third.coef, vec![(0, q("1")), (1, q("2")), (2, q("-1"))]);
    assert_eq!(third.constant, q("1"));
}

#[test]
fn an_or_of_input_bounds_is_a_union_of_boxes() {
    let text = format!(
        "{HEADER}(assert (<= X_1 1))(assert (>= X_1 0))\n\
         (assert (or (and (<= X_0 -0.5) (>= X_0 -1)) (and (<= X_0 1) (>= X_0 0.5))))\n\
         (assert (<= Y_0 Y_1))\n"
    );
    let p = parse(&text).unwrap();
    assert_eq!(p.boxes.len(), 2);
    assert_eq!(
        (p.boxes[0].lower[0].clone(), p.boxes[0].upper[0].clone()),
        (q("-1"), q("-0.5"))
    );
    assert_eq!(
        (p.boxes[1].lower[0].clone(), p.boxes[1].upper[0].clone()),
        (q("0.5"), q("1"))
    );
    assert_eq!(p.boxes[1].upper[1], q("1"));
    assert_eq!(p.disjuncts.len(), 1);
}

#[test]
fn top_level_output_constraints_join_every_disjunct() {
    let text = format!(
        "{HEADER}(assert (<= X_0 1))(assert (>= X_0 0))(assert (<= X_1 1))(assert (>= X_1 0))\n\
         (assert (<= Y_0 Y_1))\n(assert (<= Y_0 Y_2))\n"
    );
    let p = parse(&text).unwrap();
    assert_eq!(p.disjuncts.len(), 1);
    assert_eq!(p.disjuncts[0].len(), 2);
}

fn refusal(body: &str) -> VnnlibError {
    let text = format!("{HEADER}(assert (<= X_0 1))(assert (>= X_0 0))(assert (<= X_1 1))(assert (>= X_1 0))\n{body}");
    parse(&text).expect_err(body)
}

#[test]
fn what_is_outside_the_subset_is_refused_with_its_line_and_construct() {
    let e = refusal("(assert (< Y_0 Y_1))");
    assert_eq!(e.line, 7);
    assert!(e.message.contains("`<`"), "{e}");
    assert!(refusal("(assert (<= (* Y_0 Y_1) 0))")
        .message
        .contains("`*`"));
    assert!(refusal("(assert (<= (exp Y_0) 0))").message.contains("exp"));
    assert!(refusal("(assert (<= (+ X_0 X_1) 1))")
        .message
        .contains("single X_i"));
    assert!(refusal("(assert (<= X_0 Y_1))").message.contains("mix"));
    assert!(refusal("(assert (or (and (<= X_0 0.5) (<= Y_0 1))))")
        .message
        .contains("mix"));
    assert!(
        refusal("(assert (or (<= X_0 0.5)))(assert (or (<= X_1 0.5)))")
            .message
            .contains("only one `or` over the inputs")
    );
    assert!(refusal("(assert (<= Y_5 0))")
        .message
        .contains("Y_5 used before"));
    assert!(refusal("(check-sat)").message.contains("check-sat"));
    assert!(refusal("(declare-const Z Real)")
        .message
        .contains("only X_i and Y_j"));
    assert!(refusal("(declare-const X_9 Int)").message.contains("Int"));
    assert!(refusal("(declare-const X_0 Real)")
        .message
        .contains("twice"));
    assert!(refusal("(assert (<= Y_0 0)").message.contains("not closed"));
    assert!(refusal(")").message.contains("without a matching"));
    assert!(refusal("(assert (<= Y_0 0x1))").message.contains("neither"));
    assert!(refusal("(assert (<= X_0 -1))")
        .message
        .contains("empty box"));
}

#[test]
fn unbounded_inputs_gaps_and_deep_nesting_are_refused() {
    let e =
        parse("(declare-const X_0 Real)(declare-const Y_0 Real)(assert (<= X_0 1))").unwrap_err();
    assert!(e.message.contains("not bounded above and below"), "{e}");
    let e = parse("(declare-const X_1 Real)").unwrap_err();
    assert!(e.message.contains("X_0 is not declared"), "{e}");
    let deep = format!("{}{}", "(".repeat(MAX_DEPTH + 1), ")".repeat(MAX_DEPTH + 1));
    assert!(parse(&deep).unwrap_err().message.contains("nesting"));
    let e = parse("(declare-const X_99999999 Real)").unwrap_err();
    assert!(e.message.contains("beyond"), "{e}");
}
