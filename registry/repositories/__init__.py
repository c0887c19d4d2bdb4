"""Data access: queries and statements over the registry tables, no business rules."""
