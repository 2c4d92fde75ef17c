//! Tool catalog load (the host's `--tools` file): never panics; a catalog that loads keeps
//! every tool it names; arrays in place of objects are refused.
#![no_main]

use aml_core::ToolCatalog;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(catalog) = ToolCatalog::from_json(text) else {
        return;
    };
    let doc = aml_core::strict::parse_str(text).expect("a loaded catalog is strict JSON");
    let tools = doc["tools"]
        .as_array()
        .expect("a loaded catalog is an object with a tools array");
    assert_eq!(catalog.len(), tools.len());
    for entry in tools {
        assert!(
            entry.is_object(),
            "a tool entry that is not an object loaded: {entry}"
        );
        let tool = catalog
            .get(entry["name"].as_str().unwrap())
            .expect("every named tool is registered");
        assert_eq!(tool.effect().as_str(), entry["effect"]);
        assert_eq!(tool.input_schema(), &entry["input_schema"]);
        // Checking any argument value must answer, not panic.
        let _ = tool.check(&entry["input_schema"]);
    }
});
