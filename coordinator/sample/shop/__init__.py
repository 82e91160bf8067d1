"""A small shop's stock: item name -> units on hand."""
