"""Real text for measuring temperatures: words and short phrases grouped by what they mean.

Each category has a name (used as a query, like "fruit" against apple and banana), member words,
and paraphrase queries that describe a member without naming it.
"""

from __future__ import annotations

CATEGORIES: dict[str, dict[str, list[str]]] = {
    "fruit": {
        "members": ["apple", "banana", "cherry", "grape", "mango", "pear", "peach", "orange",
                    "strawberry", "pineapple", "plum", "watermelon"],
        "queries": ["something sweet that grows on trees", "a yellow tropical food",
                    "juicy berries for dessert", "fruit"],
    },
    "furniture": {
        "members": ["chair", "table", "sofa", "bed", "desk", "wardrobe", "bookshelf", "stool",
                    "armchair", "dresser", "bench", "cabinet"],
        "queries": ["something to sit on", "where you sleep at night", "furniture",
                    "a piece of furniture for the living room"],
    },
    "colour": {
        "members": ["red", "blue", "green", "yellow", "purple", "orange colour", "pink", "brown",
                    "black", "white", "grey", "turquoise"],
        "queries": ["crimson", "navy", "a colour", "the shade of the sky"],
    },
    "animal": {
        "members": ["dog", "cat", "horse", "cow", "lion", "tiger", "elephant", "rabbit", "wolf",
                    "bear", "sheep", "giraffe"],
        "queries": ["a pet that barks", "a big cat in the jungle", "animal", "farm animals"],
    },
    "vehicle": {
        "members": ["car", "bus", "truck", "bicycle", "motorcycle", "train", "airplane", "boat",
                    "taxi", "scooter", "tram", "helicopter"],
        "queries": ["something you drive to work", "public transport", "vehicle",
                    "it flies in the sky"],
    },
    "tool": {
        "members": ["hammer", "screwdriver", "wrench", "saw", "drill", "pliers", "chisel",
                    "shovel", "axe", "tape measure", "spanner", "file"],
        "queries": ["something to drive nails", "tools in a workshop", "tool",
                    "used to cut wood"],
    },
    "clothing": {
        "members": ["shirt", "trousers", "jacket", "dress", "skirt", "sweater", "coat", "jeans",
                    "socks", "scarf", "hat", "gloves"],
        "queries": ["something to wear in winter", "clothes", "what you put on your feet",
                    "clothing"],
    },
    "weather": {
        "members": ["rain", "snow", "sunshine", "fog", "storm", "thunder", "wind", "hail",
                    "drizzle", "blizzard", "heatwave", "frost"],
        "queries": ["bad weather", "it is pouring outside", "weather", "a cold winter day"],
    },
    "emotion": {
        "members": ["happiness", "sadness", "anger", "fear", "joy", "surprise", "disgust",
                    "anxiety", "love", "jealousy", "pride", "shame"],
        "queries": ["feeling", "how you feel when you win", "being scared", "emotion"],
    },
    "sport": {
        "members": ["football", "tennis", "basketball", "golf", "swimming", "cycling", "boxing",
                    "rugby", "cricket", "baseball", "volleyball", "skiing"],
        "queries": ["sport", "a game played with a ball", "exercise in the water",
                    "olympic sports"],
    },
    "instrument": {
        "members": ["piano", "guitar", "violin", "drums", "flute", "trumpet", "cello",
                    "saxophone", "harp", "clarinet", "organ", "banjo"],
        "queries": ["musical instrument", "something you play in a band",
                    "an instrument with strings", "music"],
    },
    "profession": {
        "members": ["doctor", "teacher", "engineer", "lawyer", "nurse", "chef", "pilot",
                    "farmer", "plumber", "accountant", "firefighter", "architect"],
        "queries": ["a job", "someone who works in a hospital", "profession",
                    "who cooks in a restaurant"],
    },
    "drink": {
        "members": ["coffee", "tea", "water", "juice", "milk", "beer", "wine", "lemonade",
                    "cola", "whisky", "smoothie", "hot chocolate"],
        "queries": ["something to drink", "a beverage", "alcohol", "a hot drink in the morning"],
    },
    "body part": {
        "members": ["hand", "foot", "head", "arm", "leg", "eye", "ear", "nose", "mouth",
                    "knee", "shoulder", "finger"],
        "queries": ["part of the body", "what you see with", "body", "limbs"],
    },
    "building": {
        "members": ["house", "school", "hospital", "church", "castle", "skyscraper", "barn",
                    "library", "museum", "factory", "stadium", "apartment"],
        "queries": ["a building", "where children learn", "a tall tower in the city",
                    "a place to live"],
    },
    "kitchenware": {
        "members": ["knife", "fork", "spoon", "plate", "bowl", "cup", "pan", "pot", "kettle",
                    "whisk", "ladle", "cutting board"],
        "queries": ["kitchen utensils", "something to eat soup with", "cookware",
                    "things in the kitchen"],
    },
}
