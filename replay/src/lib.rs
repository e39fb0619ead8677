//! Discrete-event replay engine with the Bandela and Dimemas network models.
