"""What every layer shares and nothing in it touches a device: data types and feature levels,
errors, integer and layout rules, tensor descriptions, the input rule, support tables."""
