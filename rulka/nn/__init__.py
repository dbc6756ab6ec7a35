"""rulka.nn"""
