//! A blank 16:9 presentation: one master, layouts `Title Slide` and `Title and Content`, a theme.

use atelier_messages::ErrorBody;

use crate::office::package;

const NS: &str = r#"xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships" xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main""#;
const REL: &str = "http://schemas.openxmlformats.org/officeDocument/2006/relationships";
const CT: &str = "application/vnd.openxmlformats-officedocument";

fn content_types() -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/ppt/presentation.xml" ContentType="{CT}.presentationml.presentation.main+xml"/><Override PartName="/ppt/slideMasters/slideMaster1.xml" ContentType="{CT}.presentationml.slideMaster+xml"/><Override PartName="/ppt/slideLayouts/slideLayout1.xml" ContentType="{CT}.presentationml.slideLayout+xml"/><Override PartName="/ppt/slideLayouts/slideLayout2.xml" ContentType="{CT}.presentationml.slideLayout+xml"/><Override PartName="/ppt/theme/theme1.xml" ContentType="{CT}.theme+xml"/></Types>"#
    )
}

fn rels(items: &[(&str, &str, &str)]) -> String {
    let body: String = items
        .iter()
        .map(|(id, kind, target)| {
            format!(r#"<Relationship Id="{id}" Type="{REL}/{kind}" Target="{target}"/>"#)
        })
        .collect();
    format!(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">{body}</Relationships>"#
    )
}

fn presentation() -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<p:presentation {NS} saveSubsetFonts="1"><p:sldMasterIdLst><p:sldMasterId id="2147483648" r:id="rId1"/></p:sldMasterIdLst><p:sldIdLst/><p:sldSz cx="12192000" cy="6858000"/><p:notesSz cx="6858000" cy="9144000"/><p:defaultTextStyle><a:lvl1pPr marL="0" algn="l"><a:defRPr sz="1800"><a:solidFill><a:schemeClr val="tx1"/></a:solidFill><a:latin typeface="+mn-lt"/></a:defRPr></a:lvl1pPr></p:defaultTextStyle></p:presentation>"#
    )
}

const GROUP: &str = r#"<p:nvGrpSpPr><p:cNvPr id="1" name=""/><p:cNvGrpSpPr/><p:nvPr/></p:nvGrpSpPr><p:grpSpPr><a:xfrm><a:off x="0" y="0"/><a:ext cx="0" cy="0"/><a:chOff x="0" y="0"/><a:chExt cx="0" cy="0"/></a:xfrm></p:grpSpPr>"#;

fn placeholder(id: u32, name: &str, ph: &str, frame: Option<(u64, u64, u64, u64)>) -> String {
    let geometry = frame.map_or_else(String::new, |(x, y, cx, cy)| {
        format!(r#"<a:xfrm><a:off x="{x}" y="{y}"/><a:ext cx="{cx}" cy="{cy}"/></a:xfrm><a:prstGeom prst="rect"><a:avLst/></a:prstGeom>"#)
    });
    format!(
        r#"<p:sp><p:nvSpPr><p:cNvPr id="{id}" name="{name}"/><p:cNvSpPr><a:spLocks noGrp="1"/></p:cNvSpPr><p:nvPr>{ph}</p:nvPr></p:nvSpPr><p:spPr>{geometry}</p:spPr><p:txBody><a:bodyPr/><a:lstStyle/><a:p><a:endParaRPr lang="en-US"/></a:p></p:txBody></p:sp>"#
    )
}

fn master() -> String {
    let title = placeholder(
        2,
        "Title Placeholder 1",
        r#"<p:ph type="title"/>"#,
        Some((838200, 365125, 10515600, 1325563)),
    );
    let body = placeholder(
        3,
        "Text Placeholder 2",
        r#"<p:ph type="body" idx="1"/>"#,
        Some((838200, 1825625, 10515600, 4351338)),
    );
    format!(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<p:sldMaster {NS}><p:cSld><p:bg><p:bgRef idx="1001"><a:schemeClr val="bg1"/></p:bgRef></p:bg><p:spTree>{GROUP}{title}{body}</p:spTree></p:cSld><p:clrMap bg1="lt1" tx1="dk1" bg2="lt2" tx2="dk2" accent1="accent1" accent2="accent2" accent3="accent3" accent4="accent4" accent5="accent5" accent6="accent6" hlink="hlink" folHlink="folHlink"/><p:sldLayoutIdLst><p:sldLayoutId id="2147483649" r:id="rId1"/><p:sldLayoutId id="2147483650" r:id="rId2"/></p:sldLayoutIdLst><p:txStyles><p:titleStyle><a:lvl1pPr algn="l"><a:defRPr sz="4400"><a:solidFill><a:schemeClr val="tx1"/></a:solidFill><a:latin typeface="+mj-lt"/></a:defRPr></a:lvl1pPr></p:titleStyle><p:bodyStyle><a:lvl1pPr marL="228600" indent="-228600"><a:buFont typeface="Arial"/><a:buChar char="&#8226;"/><a:defRPr sz="2800"><a:solidFill><a:schemeClr val="tx1"/></a:solidFill><a:latin typeface="+mn-lt"/></a:defRPr></a:lvl1pPr></p:bodyStyle><p:otherStyle><a:lvl1pPr><a:defRPr sz="1800"/></a:lvl1pPr></p:otherStyle></p:txStyles></p:sldMaster>"#
    )
}

fn layout(name: &str, kind: &str, shapes: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<p:sldLayout {NS} type="{kind}" preserve="1"><p:cSld name="{name}"><p:spTree>{GROUP}{shapes}</p:spTree></p:cSld><p:clrMapOvr><a:masterClrMapping/></p:clrMapOvr></p:sldLayout>"#
    )
}

fn title_layout() -> String {
    let title = placeholder(
        2,
        "Title 1",
        r#"<p:ph type="ctrTitle"/>"#,
        Some((1524000, 1122363, 9144000, 2387600)),
    );
    let subtitle = placeholder(
        3,
        "Subtitle 2",
        r#"<p:ph type="subTitle" idx="1"/>"#,
        Some((1524000, 3602038, 9144000, 1655762)),
    );
    layout("Title Slide", "title", &format!("{title}{subtitle}"))
}

fn content_layout() -> String {
    let title = placeholder(2, "Title 1", r#"<p:ph type="title"/>"#, None);
    let body = placeholder(3, "Content Placeholder 2", r#"<p:ph idx="1"/>"#, None);
    layout("Title and Content", "obj", &format!("{title}{body}"))
}

fn theme() -> String {
    let colors = [
        ("dk1", r#"<a:sysClr val="windowText" lastClr="000000"/>"#),
        ("lt1", r#"<a:sysClr val="window" lastClr="FFFFFF"/>"#),
        ("dk2", r#"<a:srgbClr val="44546A"/>"#),
        ("lt2", r#"<a:srgbClr val="E7E6E6"/>"#),
        ("accent1", r#"<a:srgbClr val="4472C4"/>"#),
        ("accent2", r#"<a:srgbClr val="ED7D31"/>"#),
        ("accent3", r#"<a:srgbClr val="A5A5A5"/>"#),
        ("accent4", r#"<a:srgbClr val="FFC000"/>"#),
        ("accent5", r#"<a:srgbClr val="5B9BD5"/>"#),
        ("accent6", r#"<a:srgbClr val="70AD47"/>"#),
        ("hlink", r#"<a:srgbClr val="0563C1"/>"#),
        ("folHlink", r#"<a:srgbClr val="954F72"/>"#),
    ];
    let scheme: String = colors
        .iter()
        .map(|(name, value)| format!("<a:{name}>{value}</a:{name}>"))
        .collect();
    let fill = r#"<a:solidFill><a:schemeClr val="phClr"/></a:solidFill>"#;
    let line = r#"<a:ln w="6350"><a:solidFill><a:schemeClr val="phClr"/></a:solidFill></a:ln>"#;
    let effect = "<a:effectStyle><a:effectLst/></a:effectStyle>";
    format!(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<a:theme xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" name="Atelier"><a:themeElements><a:clrScheme name="Atelier">{scheme}</a:clrScheme><a:fontScheme name="Atelier"><a:majorFont><a:latin typeface="Calibri Light"/><a:ea typeface=""/><a:cs typeface=""/></a:majorFont><a:minorFont><a:latin typeface="Calibri"/><a:ea typeface=""/><a:cs typeface=""/></a:minorFont></a:fontScheme><a:fmtScheme name="Atelier"><a:fillStyleLst>{fill}{fill}{fill}</a:fillStyleLst><a:lnStyleLst>{line}{line}{line}</a:lnStyleLst><a:effectStyleLst>{effect}{effect}{effect}</a:effectStyleLst><a:bgFillStyleLst>{fill}{fill}{fill}</a:bgFillStyleLst></a:fmtScheme></a:themeElements></a:theme>"#
    )
}

/// A new presentation with no slides.
pub(crate) fn blank() -> Result<Vec<u8>, ErrorBody> {
    let root_rels = rels(&[("rId1", "officeDocument", "ppt/presentation.xml")]);
    let presentation_rels = rels(&[
        ("rId1", "slideMaster", "slideMasters/slideMaster1.xml"),
        ("rId2", "theme", "theme/theme1.xml"),
    ]);
    let master_rels = rels(&[
        ("rId1", "slideLayout", "../slideLayouts/slideLayout1.xml"),
        ("rId2", "slideLayout", "../slideLayouts/slideLayout2.xml"),
        ("rId3", "theme", "../theme/theme1.xml"),
    ]);
    let layout_rels = rels(&[("rId1", "slideMaster", "../slideMasters/slideMaster1.xml")]);
    package::build(&[
        ("[Content_Types].xml", &content_types()),
        ("_rels/.rels", &root_rels),
        ("ppt/presentation.xml", &presentation()),
        ("ppt/_rels/presentation.xml.rels", &presentation_rels),
        ("ppt/slideMasters/slideMaster1.xml", &master()),
        ("ppt/slideMasters/_rels/slideMaster1.xml.rels", &master_rels),
        ("ppt/slideLayouts/slideLayout1.xml", &title_layout()),
        ("ppt/slideLayouts/_rels/slideLayout1.xml.rels", &layout_rels),
        ("ppt/slideLayouts/slideLayout2.xml", &content_layout()),
        ("ppt/slideLayouts/_rels/slideLayout2.xml.rels", &layout_rels),
        ("ppt/theme/theme1.xml", &theme()),
    ])
}
