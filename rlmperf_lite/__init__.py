"""RLM Performance Foundations library."""
