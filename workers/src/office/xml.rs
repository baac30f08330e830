//! A small XML tree for editing OOXML parts without losing what we do not understand.
//!
//! Text and attribute values are kept in their escaped (raw) form, so an untouched element is
//! written back exactly as read; comments, processing instructions and CDATA are kept verbatim.
//! A `<!DOCTYPE>` is refused (no DTDs, so no entity expansion), and so is any entity reference
//! other than the five predefined ones and character references. Trees are bounded: at most
//! [`MAX_XML_DEPTH`] levels deep and, across the parts of one package, [`MAX_XML_NODES`] nodes.

use atelier_messages::{ErrorBody, ErrorCode};

use super::limits::{MAX_XML_DEPTH, MAX_XML_NODES, too_complex};
use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};

/// A node of the tree.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Element(Element),
    /// Character data in escaped form (`a &amp; b`).
    Text(String),
    /// A comment, processing instruction or CDATA section, verbatim with its delimiters.
    Other(String),
}

/// An element: qualified name, attributes (escaped values) and children.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Element {
    pub(crate) name: String,
    pub(crate) attrs: Vec<(String, String)>,
    pub(crate) children: Vec<Node>,
}

/// A parsed part: what precedes the root (declaration, comments) and the root element.
#[derive(Debug, Clone)]
pub(crate) struct Document {
    prolog: String,
    pub(crate) root: Element,
}

fn malformed(part: &str, why: impl std::fmt::Display) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::FileReadFailed,
        format!("the document is damaged: {part} is not well-formed XML ({why})"),
    )
}

impl Document {
    /// Parses `text` (the part called `part`, for messages).
    #[cfg(test)]
    pub(crate) fn parse(part: &str, text: &str) -> Result<Document, ErrorBody> {
        let mut nodes = MAX_XML_NODES;
        Document::parse_within(part, text, &mut nodes)
    }

    /// Parses `text` with at most `nodes` nodes (what is left of a package's budget), taking
    /// the nodes it makes from `nodes`.
    pub(crate) fn parse_within(
        part: &str,
        text: &str,
        nodes: &mut usize,
    ) -> Result<Document, ErrorBody> {
        let mut reader = Reader::from_str(text);
        reader.config_mut().check_end_names = true;
        let mut prolog = String::new();
        let mut stack: Vec<Element> = Vec::new();
        loop {
            let event = reader.read_event().map_err(|e| {
                malformed(part, format!("at byte {}: {e}", reader.error_position()))
            })?;
            if !matches!(event, Event::End(_) | Event::Eof | Event::Decl(_)) {
                *nodes = nodes.checked_sub(1).ok_or_else(|| {
                    too_complex(format!(
                        "{part}: the document has more than {MAX_XML_NODES} XML nodes"
                    ))
                })?;
            }
            match event {
                Event::Start(start) => {
                    if stack.len() >= MAX_XML_DEPTH {
                        return Err(too_complex(format!(
                            "{part} nests elements more than {MAX_XML_DEPTH} deep"
                        )));
                    }
                    stack.push(element_from(part, &start)?)
                }
                Event::Empty(start) => {
                    let element = element_from(part, &start)?;
                    if let Some(done) = attach(&mut stack, Node::Element(element)) {
                        return Ok(Document { prolog, root: done });
                    }
                }
                Event::End(_) => {
                    let mut element = stack
                        .pop()
                        .ok_or_else(|| malformed(part, "unexpected end tag"))?;
                    element.children.shrink_to_fit();
                    if let Some(done) = attach(&mut stack, Node::Element(element)) {
                        return Ok(Document { prolog, root: done });
                    }
                }
                Event::Text(text) => push_text(&mut stack, &mut prolog, &text),
                Event::GeneralRef(reference) => {
                    check_reference(part, &reference)?;
                    push_text(&mut stack, &mut prolog, &format!("&{};", &*reference));
                }
                Event::CData(data) => {
                    push_other(&mut stack, &mut prolog, format!("<![CDATA[{}]]>", &*data))
                }
                Event::Comment(comment) => {
                    push_other(&mut stack, &mut prolog, format!("<!--{}-->", &*comment))
                }
                Event::PI(pi) => push_other(&mut stack, &mut prolog, format!("<?{}?>", &*pi)),
                Event::Decl(decl) => prolog.push_str(&format!("<?{}?>", &*decl)),
                Event::DocType(_) => {
                    return Err(ErrorBody::new(
                        ErrorCode::FileReadFailed,
                        format!(
                            "{part} declares a DTD (<!DOCTYPE>); documents with DTDs are refused to prevent entity expansion"
                        ),
                    ));
                }
                Event::Eof => return Err(malformed(part, "no root element or unclosed elements")),
            }
        }
    }

    /// The part as XML text.
    pub(crate) fn to_xml(&self) -> String {
        let mut out = String::with_capacity(4096);
        out.push_str(&self.prolog);
        if self.prolog.is_empty() {
            out.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n");
        }
        self.root.write(&mut out);
        out
    }

    /// A new document with the standard declaration.
    pub(crate) fn new(root: Element) -> Document {
        Document {
            prolog: "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n".to_string(),
            root,
        }
    }
}

fn check_reference(part: &str, name: &str) -> Result<(), ErrorBody> {
    let known = matches!(name, "amp" | "lt" | "gt" | "quot" | "apos") || name.starts_with('#');
    if known {
        return Ok(());
    }
    Err(ErrorBody::new(
        ErrorCode::FileReadFailed,
        format!("{part} uses the undefined entity &{name};"),
    ))
}

fn element_from(part: &str, start: &BytesStart<'_>) -> Result<Element, ErrorBody> {
    let mut attrs = Vec::new();
    for attr in start.attributes() {
        let attr = attr.map_err(|e| malformed(part, e))?;
        attrs.push((attr.key.into_inner().to_string(), attr.value.into_owned()));
    }
    attrs.shrink_to_fit();
    Ok(Element {
        name: start.name().into_inner().to_string(),
        attrs,
        children: Vec::new(),
    })
}

/// Adds a finished node to its parent; returns the root when it closes.
fn attach(stack: &mut [Element], node: Node) -> Option<Element> {
    match (stack.last_mut(), node) {
        (Some(parent), node) => {
            parent.children.push(node);
            None
        }
        (None, Node::Element(root)) => Some(root),
        (None, _) => None,
    }
}

fn push_text(stack: &mut [Element], prolog: &mut String, text: &str) {
    let Some(parent) = stack.last_mut() else {
        prolog.push_str(text);
        return;
    };
    if let Some(Node::Text(previous)) = parent.children.last_mut() {
        previous.push_str(text);
    } else {
        parent.children.push(Node::Text(text.to_string()));
    }
}

fn push_other(stack: &mut [Element], prolog: &mut String, raw: String) {
    match stack.last_mut() {
        Some(parent) => parent.children.push(Node::Other(raw)),
        None => prolog.push_str(&raw),
    }
}

/// Escapes text for element content.
pub(crate) fn escape_text(text: &str) -> String {
    let plain = text.bytes().all(|b| {
        !matches!(b, b'&' | b'<' | b'>') && (b >= b' ' || matches!(b, b'\t' | b'\n' | b'\r'))
    });
    if plain && !text.contains(['\u{FFFE}', '\u{FFFF}']) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c if is_xml_char(c) => out.push(c),
            _ => {}
        }
    }
    out
}

/// Escapes text for an attribute value.
pub(crate) fn escape_attr(text: &str) -> String {
    let escaped = escape_text(text);
    if escaped.contains('"') {
        escaped.replace('"', "&quot;")
    } else {
        escaped
    }
}

/// Characters XML 1.0 allows (others are dropped when writing).
fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && c != '\u{FFFE}' && c != '\u{FFFF}')
}

/// Decodes the predefined entities and character references of escaped text.
pub(crate) fn unescape(raw: &str) -> String {
    if !raw.contains('&') {
        return raw.to_string();
    }
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp + 1..];
        let Some(semi) = after.find(';') else {
            out.push_str(&rest[amp..]);
            return out;
        };
        match decode_entity(&after[..semi]) {
            Some(c) => out.push(c),
            None => out.push_str(&rest[amp..amp + semi + 2]),
        }
        rest = &after[semi + 1..];
    }
    out.push_str(rest);
    out
}

fn decode_entity(name: &str) -> Option<char> {
    match name {
        "amp" => Some('&'),
        "lt" => Some('<'),
        "gt" => Some('>'),
        "quot" => Some('"'),
        "apos" => Some('\''),
        _ => {
            let number = name.strip_prefix('#')?;
            let code = match number
                .strip_prefix('x')
                .or_else(|| number.strip_prefix('X'))
            {
                Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                None => number.parse().ok()?,
            };
            char::from_u32(code)
        }
    }
}

/// The part of a qualified name after the prefix.
pub(crate) fn local(name: &str) -> &str {
    name.rsplit_once(':').map_or(name, |(_, local)| local)
}

impl Element {
    /// A new element with attributes given unescaped.
    pub(crate) fn new(name: &str, attrs: &[(&str, &str)]) -> Element {
        Element {
            name: name.to_string(),
            attrs: attrs
                .iter()
                .map(|(key, value)| (key.to_string(), escape_attr(value)))
                .collect(),
            children: Vec::new(),
        }
    }

    /// Builder: adds a child element.
    pub(crate) fn with(mut self, child: Element) -> Element {
        self.children.push(Node::Element(child));
        self
    }

    /// Builder: adds escaped text for `text`.
    pub(crate) fn with_text(mut self, text: &str) -> Element {
        self.children.push(Node::Text(escape_text(text)));
        self
    }

    pub(crate) fn local_name(&self) -> &str {
        local(&self.name)
    }

    /// An attribute's unescaped value by qualified name.
    pub(crate) fn attr(&self, name: &str) -> Option<String> {
        self.attrs
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| unescape(value))
    }

    /// An attribute's unescaped value by local name (any prefix).
    pub(crate) fn attr_local(&self, name: &str) -> Option<String> {
        self.attrs
            .iter()
            .find(|(key, _)| local(key) == name)
            .map(|(_, value)| unescape(value))
    }

    /// Sets (or adds) an attribute from an unescaped value.
    pub(crate) fn set_attr(&mut self, name: &str, value: &str) {
        let escaped = escape_attr(value);
        match self.attrs.iter_mut().find(|(key, _)| key == name) {
            Some((_, existing)) => *existing = escaped,
            None => self.attrs.push((name.to_string(), escaped)),
        }
    }

    pub(crate) fn remove_attr(&mut self, name: &str) {
        self.attrs.retain(|(key, _)| key != name);
    }

    /// Child elements.
    pub(crate) fn elements(&self) -> impl Iterator<Item = &Element> {
        self.children.iter().filter_map(|node| match node {
            Node::Element(element) => Some(element),
            _ => None,
        })
    }

    pub(crate) fn elements_mut(&mut self) -> impl Iterator<Item = &mut Element> {
        self.children.iter_mut().filter_map(|node| match node {
            Node::Element(element) => Some(element),
            _ => None,
        })
    }

    /// The first child element with this qualified name.
    pub(crate) fn child(&self, name: &str) -> Option<&Element> {
        self.elements().find(|element| element.name == name)
    }

    pub(crate) fn child_mut(&mut self, name: &str) -> Option<&mut Element> {
        self.elements_mut().find(|element| element.name == name)
    }

    /// The first child element with this local name (any prefix).
    pub(crate) fn child_local(&self, name: &str) -> Option<&Element> {
        self.elements().find(|element| element.local_name() == name)
    }

    /// Child elements with this qualified name.
    pub(crate) fn children_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> {
        self.elements().filter(move |element| element.name == name)
    }

    /// Follows a path of qualified child names.
    pub(crate) fn path(&self, names: &[&str]) -> Option<&Element> {
        names
            .iter()
            .try_fold(self, |element, name| element.child(name))
    }

    pub(crate) fn path_mut(&mut self, names: &[&str]) -> Option<&mut Element> {
        let mut current = self;
        for name in names {
            current = current.child_mut(name)?;
        }
        Some(current)
    }

    /// Removes child elements matching `keep == false`; returns how many were removed.
    pub(crate) fn retain_elements(&mut self, mut keep: impl FnMut(&Element) -> bool) -> usize {
        let before = self.children.len();
        self.children.retain(|node| match node {
            Node::Element(element) => keep(element),
            _ => true,
        });
        before - self.children.len()
    }

    /// The child with `name`, created (placed by `order`, the schema's child order) if missing.
    pub(crate) fn ensure_child(&mut self, name: &str, order: &[&str]) -> &mut Element {
        let position = self
            .children
            .iter()
            .position(|node| matches!(node, Node::Element(element) if element.name == name));
        let index = match position {
            Some(index) => index,
            None => self.insert_ordered(Element::new(name, &[]), order),
        };
        match &mut self.children[index] {
            Node::Element(element) => element,
            // The index was found or inserted as an element just above.
            _ => unreachable!("ensure_child index points at an element"),
        }
    }

    /// Inserts `child` before the first existing child that comes after it in `order`
    /// (children not in `order` are skipped over); returns its index.
    pub(crate) fn insert_ordered(&mut self, child: Element, order: &[&str]) -> usize {
        let rank = |name: &str| order.iter().position(|o| *o == name);
        let mine = rank(&child.name).unwrap_or(order.len());
        let index = self
            .children
            .iter()
            .position(|node| match node {
                Node::Element(element) => rank(&element.name).is_some_and(|r| r > mine),
                _ => false,
            })
            .unwrap_or(self.children.len());
        self.children.insert(index, Node::Element(child));
        index
    }

    /// The unescaped text of this element's direct text children.
    pub(crate) fn text(&self) -> String {
        self.children
            .iter()
            .filter_map(|node| match node {
                Node::Text(raw) => Some(unescape(raw)),
                Node::Other(raw) => raw
                    .strip_prefix("<![CDATA[")
                    .and_then(|r| r.strip_suffix("]]>"))
                    .map(str::to_string),
                _ => None,
            })
            .collect()
    }

    /// Replaces the children with one text node.
    pub(crate) fn set_text(&mut self, text: &str) {
        self.children = vec![Node::Text(escape_text(text))];
    }

    /// Every descendant element (depth first, document order), this one excluded.
    pub(crate) fn descendants(&self) -> Vec<&Element> {
        let mut out = Vec::new();
        let mut stack: Vec<&Element> = self.elements().collect();
        stack.reverse();
        while let Some(element) = stack.pop() {
            out.push(element);
            let before = stack.len();
            stack.extend(element.elements());
            stack[before..].reverse();
        }
        out
    }

    /// Writes the element as XML.
    pub(crate) fn write(&self, out: &mut String) {
        out.push('<');
        out.push_str(&self.name);
        for (key, value) in &self.attrs {
            out.push(' ');
            out.push_str(key);
            out.push_str("=\"");
            out.push_str(value);
            out.push('"');
        }
        if self.children.is_empty() {
            out.push_str("/>");
            return;
        }
        out.push('>');
        for child in &self.children {
            match child {
                Node::Element(element) => element.write(out),
                Node::Text(raw) | Node::Other(raw) => out.push_str(raw),
            }
        }
        out.push_str("</");
        out.push_str(&self.name);
        out.push('>');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_text_attributes_and_comments() {
        let xml = "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\r\n<a:r xmlns:a=\"urn:x\" v=\"1 &amp; 2\"><!-- c --><a:t xml:space=\"preserve\"> x &lt; y &#233;</a:t><e/><![CDATA[<raw>]]></a:r>";
        let doc = Document::parse("p.xml", xml).unwrap();
        assert_eq!(doc.to_xml(), xml);
        assert_eq!(doc.root.attr("v").as_deref(), Some("1 & 2"));
        assert_eq!(doc.root.child("a:t").unwrap().text(), " x < y é");
        assert_eq!(doc.root.descendants().len(), 2);
    }

    #[test]
    fn refuses_dtds_unknown_entities_and_broken_xml() {
        let bomb = "<?xml version=\"1.0\"?><!DOCTYPE l [<!ENTITY a \"aaaa\"><!ENTITY b \"&a;&a;\">]><r>&b;</r>";
        let err = Document::parse("x.xml", bomb).unwrap_err();
        assert_eq!(err.code, ErrorCode::FileReadFailed);
        assert!(err.message.contains("DTD"), "{}", err.message);
        let entity = Document::parse("x.xml", "<r>&b;</r>").unwrap_err();
        assert!(
            entity.message.contains("undefined entity &b;"),
            "{}",
            entity.message
        );
        for broken in ["<r><a></r>", "<r>", "", "<r></r"] {
            assert_eq!(
                Document::parse("x.xml", broken).unwrap_err().code,
                ErrorCode::FileReadFailed,
                "{broken}"
            );
        }
    }

    #[test]
    fn orders_inserted_children_and_escapes() {
        let mut root = Element::new("w", &[]).with(Element::new("c", &[]));
        root.insert_ordered(Element::new("a", &[]), &["a", "b", "c"]);
        root.ensure_child("b", &["a", "b", "c"])
            .set_text("1 < 2 & \u{1}");
        let mut out = String::new();
        root.write(&mut out);
        assert_eq!(out, "<w><a/><b>1 &lt; 2 &amp; </b><c/></w>");
        assert_eq!(unescape("&#x41;&lt;&bogus;"), "A<&bogus;");
    }
}
