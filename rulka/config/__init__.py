"""rulka.config"""
