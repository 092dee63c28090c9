from torch.utils.data import Dataset, DataLoader
import os
import pandas as pd
from PIL import Image

class CustomImageDataset(Dataset):
    def __init__(self, annotations_file, img_dir, transform=None, target_transform=None):
        self.img_labels = pd.read_csv(annotations_file)
        self.img_dir = img_dir
        self.transform = transform
        self.target_transform = target_transform

    def __len__(self):
        return len(self.img_labels)

    def __getitem__(self, idx):
        img_path = os.path.join(self.img_dir, self.img_labels.iloc[idx, 0])
        image = Image.open(img_path).convert('RGB')
        label = self.img_labels.iloc[idx, 1]
        if self.transform:
            image = self.transform(image)
        if self.target_transform:
            label = self.target_transform(label)
        return image, label

transform = transforms.Compose([
    transforms.Resize(256),
    transforms.CenterCrop(224),
    transforms.ToTensor(),
])
dataset = CustomImageDataset(annotations_file="labels.csv", img_dir="path/to/images", transform=transform)
dataloader = DataLoader(dataset, batch_size=4, shuffle=True, num_workers=4)

for images, labels in dataloader:
    # 进行模型训练的步骤
    pass
