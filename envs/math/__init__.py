"""``math-v0``: questions with exact answers, a sandboxed Python tool, ``math_equiv`` scoring."""
