"""How events reach a function and leave it: the HTTP face and its error mapping, CloudEvents in and
out, who may send (sender identity), and the one client that sends to the broker.
"""
