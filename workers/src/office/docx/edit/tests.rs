//! Splicing replacements into run texts.

use super::replace::splice;

#[test]
fn splices_matches_across_segments() {
    let mut texts = vec![
        "Company: {{com".to_string(),
        "pa".to_string(),
        "ny}} Ltd".to_string(),
    ];
    splice(&mut texts, 9, 20, "Acme");
    assert_eq!(texts, vec!["Company: Acme", "", " Ltd"]);
    let mut whole = vec!["a {{x}} b".to_string()];
    splice(&mut whole, 2, 7, "1");
    assert_eq!(whole, vec!["a 1 b"]);
    let mut edge = vec!["ab".to_string(), "cd".to_string()];
    splice(&mut edge, 2, 4, "X");
    assert_eq!(edge, vec!["ab", "X"]);
}
