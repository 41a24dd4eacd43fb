"""sql-v0: answer questions about a database by exploring it with SQL."""
