"""Stage 2, plan: desired state + inventory + history -> Plan. Pure."""
