"""rulka.net"""
