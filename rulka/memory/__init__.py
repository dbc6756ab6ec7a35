"""rulka.memory"""
