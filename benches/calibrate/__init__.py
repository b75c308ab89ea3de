"""Calibration and checks: ranking and capture settings replayed over the development data."""
