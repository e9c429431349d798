"""(see the package docstring once written)"""
