"""Generation: backends that return their own prompt ids, and the retry / aggregate / drop helpers."""
