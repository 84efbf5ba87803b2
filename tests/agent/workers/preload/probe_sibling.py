WHO = "probe_sibling next to the script"
