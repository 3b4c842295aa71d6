"""Tiny random-init instances of every diffusers model class with positional code (WIP)."""
from .builder import build
from .discover import model_classes, positional_classes, positional_kinds
