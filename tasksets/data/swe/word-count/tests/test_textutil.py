import unittest

import textutil


class TestWordCount(unittest.TestCase):
    def test_spaces(self):
        self.assertEqual(textutil.word_count("a  b"), 2)
        self.assertEqual(textutil.word_count(" one\ttwo\nthree "), 3)

    def test_empty(self):
        self.assertEqual(textutil.word_count(""), 0)

    def test_shout(self):
        self.assertEqual(textutil.shout("hi"), "HI!")


if __name__ == "__main__":
    unittest.main()
