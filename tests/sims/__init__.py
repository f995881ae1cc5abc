"""Simulators and checks that test the model's rules against a schedule run step by step or
against a microbenchmark's record (not part of the model; their outputs sit under validation/)."""
