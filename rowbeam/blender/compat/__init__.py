"""The corner that talks to Blender itself: version differences, opening .blend files safely, temporary
scene edits, the scene clock and pose evaluation."""
